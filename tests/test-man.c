/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-man.c - every tunable, function and constant is documented, and every man page renders without a warning. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "../man/doc-tunables.h"

/* Where the pages are built and where groff is: from make through the
 * environment, with configure's values built in for a run by hand. */
#ifndef MAN_BUILDDIR
#define MAN_BUILDDIR "man"
#endif
#ifndef TOP_SRCDIR
#define TOP_SRCDIR "."
#endif
#ifndef GROFF_PATH
#define GROFF_PATH ""
#endif

/* The pages written by hand, each backend module's among them. */
#define BACKEND_PAGE(name) "devcache-" #name ".7",
static const char *const handwritten[] = {"devcache.1",	  "libdevcache.3",    "devcache-torch.3",
						 "devcache-python.3", "devcache.conf.5", "devcache-trace.5",
						 BACKEND_MODULES(BACKEND_PAGE)};
#define N_HANDWRITTEN (sizeof handwritten / sizeof *handwritten)

/* Names in devcache.h that are not part of what a user reads about. */
static const char *const undocumented_ok[] = {
	"DEVCACHE_H", "DEVCACHE_API", "DEVCACHE_PRINTF", "DEVCACHE_BACKEND_H",
};

static const char *builddir(void)
{
	const char *v = getenv("MAN_BUILDDIR");

	return v && *v ? v : MAN_BUILDDIR;
}

/* NULL: groff is not available. */
static const char *groff(void)
{
	const char *v = getenv("GROFF");

	if (!v)
		v = GROFF_PATH;
	return *v ? v : NULL;
}

/* ---- a growing list of problems, reported at once --------------------------- */

struct problems {
	char *text;
	size_t len, count;
};

static void problem(struct problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void problem(struct problems *p, const char *fmt, ...)
{
	va_list ap;
	char line[1024];
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof line)
		n = sizeof line - 1;
	p->text = realloc(p->text, p->len + (size_t)n + 2);
	assert_non_null(p->text);
	memcpy(p->text + p->len, line, (size_t)n);
	p->len += (size_t)n;
	p->text[p->len++] = '\n';
	p->text[p->len] = '\0';
	p->count++;
}

static void check_problems(struct problems *p)
{
	if (p->count) {
		char *text = p->text;

		p->text = NULL;
		fail_msg("%zu problem(s):\n%s", p->count, text);
	}
}

/* ---- files -------------------------------------------------------------------- */

static char *path_in(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	assert_non_null(p);
	snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* The whole file, or NULL when it cannot be read. */
static char *slurp_page(const char *name)
{
	char *path = path_in(builddir(), name);
	char *text = test_slurp(path);

	free(path);
	return text;
}

/* Where the first line that starts with prefix is, or NULL; whole: the line
 * is exactly prefix. */
static const char *find_line_at(const char *text, const char *prefix, int whole)
{
	size_t n = strlen(prefix);

	for (const char *p = text; p; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (strncmp(p, prefix, n) == 0 && (!whole || p[n] == '\n' || p[n] == '\0'))
			return p;
	}
	return NULL;
}

static const char *find_line(const char *text, const char *prefix)
{
	return find_line_at(text, prefix, 0);
}

static int has_line(const char *text, const char *line)
{
	return find_line_at(text, line, 1) != NULL;
}

static int ident_char(int c)
{
	return isalnum(c) || c == '_';
}

/* Whether word occurs in text as a whole identifier. */
static int has_word(const char *text, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = strstr(text, word); p; p = strstr(p + 1, word))
		if ((p == text || !ident_char((unsigned char)p[-1])) && !ident_char((unsigned char)p[n]))
			return 1;
	return 0;
}

/* The pages mkman wrote, from its list: NULL-terminated. */
static char **tunable_pages(struct problems *p)
{
	char *list = slurp_page("tunable-pages.list");
	char **pages = calloc(DOC_TUNABLE_COUNT + 64, sizeof *pages);
	size_t n = 0;

	assert_non_null(pages);
	if (!list) {
		problem(p, "%s/tunable-pages.list: %s", builddir(), strerror(errno));
		return pages;
	}
	for (char *save = NULL, *line = strtok_r(list, "\n", &save); line && n < DOC_TUNABLE_COUNT + 63;
	     line = strtok_r(NULL, "\n", &save))
		pages[n++] = strdup(line);
	free(list);
	return pages;
}

static void free_pages(char **pages)
{
	for (char **p = pages; *p; p++)
		free(*p);
	free(pages);
}

/* ---- the table ---------------------------------------------------------------- */

static int blank(const char *s)
{
	for (; s && *s; s++)
		if (!isspace((unsigned char)*s))
			return 0;
	return 1;
}

static void test_table_documented(void **state)
{
	struct problems p = {0};

	(void)state;
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++) {
		const struct tunable_def *t = &doc_tunable_defs[i];

		if (blank(t->summary))
			problem(&p, "%s: no summary", t->name);
		if (blank(t->doc))
			problem(&p, "%s: no description", t->name);
		for (const char *c = t->name; *c; c++)
			if (!islower((unsigned char)*c) && !isdigit((unsigned char)*c) && *c != '_')
				problem(&p, "%s: a name is lowercase letters, digits and '_'",
					t->name);
	}
	for (size_t i = 0; i < compat_count; i++)
		if (blank(compat_defs[i].note))
			problem(&p, "%s: a PyTorch key without a note", compat_defs[i].name);
	check_problems(&p);
}

/* ---- the generated pages -------------------------------------------------------- */

static void test_tunable_pages(void **state)
{
	struct problems p = {0};
	char **pages = tunable_pages(&p);
	size_t listed = 0;

	(void)state;
	while (pages[listed])
		listed++;
	if (listed != DOC_TUNABLE_COUNT)
		problem(&p, "tunable-pages.list names %zu pages for %d tunables", listed,
			(int)DOC_TUNABLE_COUNT);
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++) {
		const char *name = doc_tunable_defs[i].name;
		char page[256], th[256], name_line[256];
		int in_list = 0;

		snprintf(page, sizeof page, "devcache.%s.5", name);
		for (char **l = pages; *l; l++)
			in_list = in_list || strcmp(*l, page) == 0;
		if (!in_list)
			problem(&p, "%s: not in tunable-pages.list, so not installed", page);

		char *text = slurp_page(page);
		if (!text) {
			problem(&p, "%s/%s: %s", builddir(), page, strerror(errno));
			continue;
		}
		snprintf(th, sizeof th, ".TH ");
		for (size_t k = strlen(th), j = 0; name[j] && k + 1 < sizeof th; k++, j++)
			th[k] = (char)toupper((unsigned char)name[j]), th[k + 1] = '\0';
		strncat(th, " 5 ", sizeof th - strlen(th) - 1);
		snprintf(name_line, sizeof name_line, "devcache.%s \\- ", name);
		if (!find_line(text, th))
			problem(&p, "%s: no '%s' title line", page, th);
		if (!find_line(text, name_line))
			problem(&p, "%s: the NAME section does not name the tunable", page);
		if (!has_line(text, ".SH DESCRIPTION") || !has_line(text, ".SH EXAMPLES"))
			problem(&p, "%s: no DESCRIPTION or EXAMPLES section", page);
		if ((doc_tunable_defs[i].flags & T_PENDING) && !strstr(text, "has no effect yet"))
			problem(&p, "%s: the tunable has no effect yet, and the page does not say so",
				page);
		free(text);
	}
	free_pages(pages);
	check_problems(&p);
}

static void test_conf_page(void **state)
{
	struct problems p = {0};
	char *text = slurp_page("devcache.conf.5");
	char line[256];

	(void)state;
	if (!text)
		fail_msg("%s/devcache.conf.5: %s", builddir(), strerror(errno));

	const char *tunables = find_line(text, ".SH TUNABLES");
	const char *compat = find_line(text, ".SH \"PYTORCH COMPATIBILITY\"");
	if (!tunables || !compat || compat < tunables) {
		free(text);
		fail_msg("devcache.conf.5: no TUNABLES section followed by PYTORCH COMPATIBILITY");
	}
	if (strstr(text, "\n.\\\" mkman:"))
		problem(&p, "devcache.conf.5: a marker line was not replaced");
	/* Each entry's tag is its name in bold, in its own section. */
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++) {
		snprintf(line, sizeof line, ".B %s", doc_tunable_defs[i].name);
		const char *at = find_line_at(tunables, line, 1);
		if (!at || at > compat)
			problem(&p, "devcache.conf.5: tunable %s is missing from TUNABLES",
				doc_tunable_defs[i].name);
	}
	for (size_t i = 0; i < compat_count; i++) {
		snprintf(line, sizeof line, ".B %s", compat_defs[i].name);
		if (!find_line_at(compat, line, 1))
			problem(&p, "devcache.conf.5: PyTorch key %s is missing from "
				    "PYTORCH COMPATIBILITY",
				compat_defs[i].name);
	}
	size_t pending = 0, notes = 0;
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++)
		pending += (doc_tunable_defs[i].flags & T_PENDING) != 0;
	for (const char *s = strstr(text, "This tunable has no effect yet"); s;
	     s = strstr(s + 1, "This tunable has no effect yet"))
		notes++;
	if (notes != pending)
		problem(&p, "devcache.conf.5: %zu notes of no effect for %zu such tunables", notes,
			pending);
	free(text);
	check_problems(&p);
}

/* Every page had its @VARIABLE@ placeholders filled in. */
static void test_substituted(void **state)
{
	struct problems p = {0};
	char **pages = tunable_pages(&p);

	(void)state;
	for (size_t k = 0; k < N_HANDWRITTEN + DOC_TUNABLE_COUNT; k++) {
		const char *name = k < N_HANDWRITTEN ? handwritten[k] : pages[k - N_HANDWRITTEN];
		if (!name)
			break;
		char *text = slurp_page(name);
		if (!text) {
			problem(&p, "%s/%s: %s", builddir(), name, strerror(errno));
			continue;
		}
		for (const char *a = strchr(text, '@'); a; a = strchr(a + 1, '@')) {
			const char *b = a + 1;

			while (isalnum((unsigned char)*b) || *b == '_')
				b++;
			if (*b == '@' && b > a + 1) {
				problem(&p, "%s: '%.*s' was not substituted", name, (int)(b - a + 1), a);
				break;
			}
		}
		free(text);
	}
	free_pages(pages);
	check_problems(&p);
}

/* ---- the API page ------------------------------------------------------------- */

static int skip_name(const char *name)
{
	for (size_t i = 0; i < sizeof undocumented_ok / sizeof *undocumented_ok; i++)
		if (strcmp(name, undocumented_ok[i]) == 0)
			return 1;
	return 0;
}

/* Names a header declares: functions after DEVCACHE_API, macros, enumeration
 * constants, and function-pointer members, (*name). */
static void check_header(struct problems *p, const char *header, const char *page_text)
{
	char *path = path_in(TOP_SRCDIR "/include", header);
	char *h = test_slurp(path);

	if (!h) {
		problem(p, "%s: %s", path, strerror(errno));
		free(path);
		return;
	}
	for (const char *s = h; *s; s++) {
		char name[128];
		size_t n = 0;
		const char *start = NULL;

		if (strncmp(s, "DEVCACHE_API ", 13) == 0 && (s == h || s[-1] == '\n')) {
			/* the function's name is the identifier before the first '(' */
			const char *paren = strchr(s, '(');
			if (paren) {
				const char *e = paren;
				while (e > s && ident_char((unsigned char)e[-1]))
					e--;
				start = e;
				n = (size_t)(paren - e);
			}
		} else if (strncmp(s, "#define DEVCACHE_", 17) == 0) {
			start = s + 8;
		} else if ((s == h || s[-1] == '\n') && strspn(s, "\t ") > 0 &&
			   strncmp(s + strspn(s, "\t "), "DEVCACHE_", 9) == 0) {
			start = s + strspn(s, "\t "); /* an enumeration constant */
		} else if (strncmp(s, "(*", 2) == 0 && ident_char((unsigned char)s[2])) {
			start = s + 2;
		}
		if (!start)
			continue;
		if (!n)
			while (ident_char((unsigned char)start[n]))
				n++;
		if (n == 0 || n >= sizeof name)
			continue;
		memcpy(name, start, n);
		name[n] = '\0';
		if (!skip_name(name) && !has_word(page_text, name))
			problem(p, "%s declares %s, which libdevcache(3) does not mention", header, name);
	}
	free(h);
	free(path);
}

static void test_api_documented(void **state)
{
	struct problems p = {0};
	char *page = slurp_page("libdevcache.3");

	(void)state;
	if (!page)
		fail_msg("%s/libdevcache.3: %s", builddir(), strerror(errno));
	check_header(&p, "devcache.h", page);
	check_header(&p, "devcache-backend.h", page);
	free(page);
	check_problems(&p);
}

/* ---- groff ----------------------------------------------------------------------- */

/* Runs groff on page; returns its exit status and its warnings in *out. */
static int run_groff(const char *prog, const char *page, char **out)
{
	int fds[2], status;
	pid_t pid;
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap + 1);
	ssize_t n;

	assert_non_null(buf);
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		close(fds[1]);
		execl(prog, prog, "-man", "-Tutf8", "-ww", "-z", page, (char *)NULL);
		fprintf(stderr, "cannot run %s: %s\n", prog, strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	while ((n = read(fds[0], buf + len, cap - len)) > 0 || (n < 0 && errno == EINTR)) {
		if (n < 0)
			continue;
		len += (size_t)n;
		if (len == cap) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
			assert_non_null(buf);
		}
	}
	close(fds[0]);
	buf[len] = '\0';
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	*out = buf;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void test_groff_clean(void **state)
{
	struct problems p = {0};
	const char *prog = groff();
	char **pages;

	(void)state;
	if (!prog)
		skip_because("groff not found (configure set GROFF empty): the pages cannot be "
			     "checked");
	pages = tunable_pages(&p);
	for (size_t k = 0; k < N_HANDWRITTEN + DOC_TUNABLE_COUNT; k++) {
		const char *name = k < N_HANDWRITTEN ? handwritten[k] : pages[k - N_HANDWRITTEN];
		if (!name)
			break;
		char *path = path_in(builddir(), name), *warnings;
		int rc;

		if (access(path, R_OK) != 0) {
			problem(&p, "%s: %s", path, strerror(errno));
			free(path);
			continue;
		}
		rc = run_groff(prog, path, &warnings);
		if (rc != 0 || *warnings)
			problem(&p, "%s -man -Tutf8 -ww -z %s: exit %d\n%s", prog, path, rc, warnings);
		free(warnings);
		free(path);
	}
	free_pages(pages);
	check_problems(&p);
}

/* The arguments of the page's .TH line, quotes removed; how many. */
static int th_args(const char *text, char args[6][128])
{
	const char *p = find_line(text, ".TH ");
	int n = 0;

	if (!p)
		return 0;
	p += 4;
	while (*p && *p != '\n' && n < 6) {
		size_t len;

		if (*p == ' ') {
			p++;
			continue;
		}
		if (*p == '"') {
			len = strcspn(p + 1, "\"\n");
			snprintf(args[n++], 128, "%.*s", (int)len, p + 1);
			p += len + 1 + (p[len + 1] == '"');
		} else {
			len = strcspn(p, " \n");
			snprintf(args[n++], 128, "%.*s", (int)len, p);
			p += len;
		}
	}
	return n;
}

/* Every page has one header and footer: the same date written the same way,
 * "libdevcache VERSION", and the project's centre header, all of which fit
 * an 80-column terminal (78 columns of text) without overlapping: the
 * title twice with the centre header between them, and the title after
 * the centred date. */
static void test_headers(void **state)
{
	struct problems p = {0};
	char **pages = tunable_pages(&p);
	char date[128] = "";

	(void)state;
	for (size_t k = 0; k < N_HANDWRITTEN + DOC_TUNABLE_COUNT; k++) {
		const char *name = k < N_HANDWRITTEN ? handwritten[k] : pages[k - N_HANDWRITTEN];
		char args[6][128], *text;

		if (!name)
			break;
		if (!(text = slurp_page(name))) {
			problem(&p, "%s: %s", name, strerror(errno));
			continue;
		}
		if (th_args(text, args) != 5) {
			problem(&p, "%s: the .TH line has not 5 arguments", name);
			free(text);
			continue;
		}
		if (!*date)
			snprintf(date, sizeof date, "%s", args[2]);
		if (!*args[2] || strcmp(args[2], date) != 0)
			problem(&p, "%s: the date is \"%s\", %s's is \"%s\"", name, args[2],
				handwritten[0], date);
		if (strncmp(args[3], "libdevcache ", 12) != 0)
			problem(&p, "%s: the footer is \"%s\", not \"libdevcache VERSION\"", name,
				args[3]);
		if (strcmp(args[4], "libdevcache") != 0)
			problem(&p, "%s: the centre header is \"%s\", not \"libdevcache\"", name,
				args[4]);
		size_t title = strlen(args[0]) + strlen(args[1]) + 2;
		if (2 * title + strlen(args[4]) + 4 > 78 ||
		    title + (78 + strlen(args[2])) / 2 + 1 > 78)
			problem(&p, "%s: the title %s(%s) is too long for an 80-column header",
				name, args[0], args[1]);
		free(text);
	}
	free_pages(pages);
	check_problems(&p);
}

/* Whether a line of groff's output passes 80 columns (UTF-8 characters). */
static size_t columns(const char *line, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += ((unsigned char)line[i] & 0xc0) != 0x80;
	return n;
}

/* The SYNOPSIS of every hand-written page fits an 80-column terminal, as
 * man shows it there. */
static void test_synopsis_width(void **state)
{
	struct problems p = {0};
	const char *prog = groff();

	(void)state;
	if (!prog)
		skip_because("groff not found (configure set GROFF empty): the pages cannot be "
			     "rendered");
	for (size_t k = 0; k < N_HANDWRITTEN; k++) {
		char *path = path_in(builddir(), handwritten[k]), cmd[8192], line[1024];
		int in_synopsis = 0;
		FILE *f;

		snprintf(cmd, sizeof cmd, "'%s' -man -Tutf8 -rLL=78n -P-cbu '%s' 2>/dev/null", prog,
			 path);
		assert_non_null(f = popen(cmd, "r"));
		while (fgets(line, sizeof line, f)) {
			size_t len = strcspn(line, "\n");

			if (line[0] != ' ' && len > 0)
				in_synopsis = strncmp(line, "SYNOPSIS", 8) == 0;
			else if (in_synopsis && columns(line, len) > 80)
				problem(&p, "%s: a SYNOPSIS line of %zu columns: %.*s", handwritten[k],
					columns(line, len), (int)len, line);
		}
		if (pclose(f) != 0)
			problem(&p, "%s failed", cmd);
		free(path);
	}
	check_problems(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_documented),
		cmocka_unit_test(test_tunable_pages),
		cmocka_unit_test(test_conf_page),
		cmocka_unit_test(test_substituted),
		cmocka_unit_test(test_api_documented),
		cmocka_unit_test(test_groff_clean),
		cmocka_unit_test(test_headers),
		cmocka_unit_test(test_synopsis_width),
	};

	return RUN_TAP(tests);
}
