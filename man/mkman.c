/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mkman.c - writes devcache.conf(5) and one devcache.NAME(5) page per tunable from lib/tunables.def, and fills in the @VARIABLES@ of the other pages. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doc-tunables.h"

/* The template holds the hand-written text; these comment lines mark where
 * the generated sections go.  Being roff comments, they leave a template
 * that was never expanded a valid page. */
#define MARK_TUNABLES ".\\\" mkman: tunables"
#define MARK_COMPAT ".\\\" mkman: compat"

#define PENDING_NOTE                                                                       \
	"This tunable has no effect yet; it is declared so that configurations can be "     \
	"written now."

static const char *progname = "mkman";

/* The values of the @NAME@ placeholders, from -s NAME=VALUE. */
#define MAX_SUBSTS 32
static struct {
	char *name;
	const char *value;
} substs[MAX_SUBSTS];
static size_t n_substs;

static const char *subst_value(const char *name, size_t len)
{
	for (size_t i = 0; i < n_substs; i++)
		if (strlen(substs[i].name) == len && memcmp(substs[i].name, name, len) == 0)
			return substs[i].value;
	return NULL;
}

static const char *param(const char *name)
{
	const char *v = subst_value(name, strlen(name));

	return v ? v : "";
}

/* Values for the EXAMPLES sections where the default would teach nothing,
 * and the environment variables that set one particular tunable: both are
 * declared with the tunable, as EXAMPLE and ENVIRONMENT in its
 * tunables.def.  Other tunables get their default, or for bool and enum
 * another accepted value (see example_value).  check_table() rejects names
 * that are not tunables, so a renamed tunable cannot leave a stale entry. */
#undef TUNABLE
#undef COMPAT
#define TUNABLE(name, type, def, range, flags, group, summary, doc)
#define COMPAT(name, note)

static const struct {
	const char *name;
	const char *value;
} examples[] = {
#define EXAMPLE(name, value) {#name, value},
#include "../lib/tunables.def"
#include "../backends/cuda/tunables.def"
#include "../backends/hip/tunables.def"
#include "../backends/ze/tunables.def"
#undef EXAMPLE
};

static const struct {
	const char *name;
	const char *variable;
	const char *text;
} tunable_env[] = {
#define ENVIRONMENT(name, variable, text) {#name, variable, text},
#include "../lib/tunables.def"
#include "../backends/cuda/tunables.def"
#include "../backends/hip/tunables.def"
#include "../backends/ze/tunables.def"
#undef ENVIRONMENT
};

#undef TUNABLE
#undef COMPAT

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_FAILURE);
}

/* A fault in the table is the documentation test's to report (it fails
 * there, with the rest of the suite); the build goes on. */
static void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void warn(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: warning: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of memory");
	return p;
}

static char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

static char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

/* ---- output files ------------------------------------------------------ */

/* Pages are written under a temporary name and renamed when complete, so an
 * interrupted build never leaves half a page behind. */
struct outfile {
	FILE *f;
	char *path;
	char *tmp;
};

static char *path_join(const char *dir, const char *name, const char *suffix)
{
	size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 2;
	char *p = xmalloc(n);

	snprintf(p, n, "%s/%s%s", dir, name, suffix);
	return p;
}

static void out_open(struct outfile *o, const char *dir, const char *name)
{
	o->path = path_join(dir, name, "");
	o->tmp = path_join(dir, name, ".tmp");
	o->f = fopen(o->tmp, "w");
	if (!o->f)
		die("%s: %s", o->tmp, strerror(errno));
}

static void out_close(struct outfile *o)
{
	int bad = ferror(o->f);

	if (fclose(o->f) != 0 || bad)
		die("%s: write error", o->tmp);
	if (rename(o->tmp, o->path) != 0)
		die("%s: %s", o->path, strerror(errno));
	free(o->path);
	free(o->tmp);
}

/* ---- the table ----------------------------------------------------------- */

static int is_tunable(const char *s, size_t n)
{
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++)
		if (strlen(doc_tunable_defs[i].name) == n && memcmp(doc_tunable_defs[i].name, s, n) == 0)
			return 1;
	return 0;
}

static int is_compat(const char *s, size_t n)
{
	for (size_t i = 0; i < compat_count; i++)
		if (strlen(compat_defs[i].name) == n && memcmp(compat_defs[i].name, s, n) == 0)
			return 1;
	return 0;
}

/* Whether value is one of the "a|b|c" alternatives. */
static int enum_has(const char *alternatives, const char *value)
{
	size_t n = strlen(value);

	for (const char *p = alternatives; *p;) {
		size_t len = strcspn(p, "|");

		if (len == n && memcmp(p, value, n) == 0)
			return 1;
		p += len;
		if (*p == '|')
			p++;
	}
	return 0;
}

/* ---- roff escaping ----------------------------------------------------- */

enum {
	ESC_CODE = 0x1,  /* a name, option, path or value: hyphens are minus signs
			    (\-) and quotes plain ASCII, as a reader types them */
	ESC_ARG = 0x2,   /* inside a macro argument: a double quote is \(dq */
	ESC_BREAK = 0x4, /* filled text: allow a line break after / and , in long words */
};

/* Writes the bytes s[0..n) as roff text.  Backslashes become \e; characters
 * that roff or the terminal would change are escaped; non-ASCII UTF-8 becomes
 * \[uXXXX], so the page does not depend on the input encoding groff assumes. */
static void put_chars(FILE *f, const char *s, size_t n, unsigned flags)
{
	int code = flags & ESC_CODE;
	int breaks = (flags & ESC_BREAK) && n > 24;

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '\\')
			fputs("\\e", f);
		else if (c == '-' && code)
			fputs("\\-", f);
		else if (c == '\'' && code)
			fputs("\\(aq", f);
		else if (c == '`')
			fputs("\\(ga", f);
		else if (c == '"' && (flags & ESC_ARG))
			fputs("\\(dq", f);
		else if ((c == '/' || c == ',') && breaks && i > 0 && i + 1 < n)
			fprintf(f, "%c\\:", c);
		else if (c >= 0x80) {
			int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
			unsigned long cp;

			if (len == 0 || i + (size_t)len > n) {
				warn("invalid UTF-8 in the tunable table");
				fputs("\\[uFFFD]", f);
				continue;
			}
			cp = c & (0x7fu >> len);
			for (int k = 1; k < len; k++)
				cp = cp << 6 | ((unsigned char)s[i + (size_t)k] & 0x3f);
			fprintf(f, "\\[u%04lX]", cp);
			i += (size_t)len - 1;
		} else
			fputc(c, f);
	}
}

/* A name or value as a macro argument or a line of its own. */
static void put_code(FILE *f, const char *s, unsigned flags)
{
	if (*s == '.' || *s == '\'')
		fputs("\\&", f);
	put_chars(f, s, strlen(s), flags | ESC_CODE);
}

/* A word is code (a name, option, path or value) rather than English when it
 * holds characters English words do not: "read-only" keeps its hyphen,
 * "devcache-trace(5)" gets a minus sign. */
static int word_is_code(const char *w, size_t n)
{
	if (n > 0 && w[0] == '-')
		return 1;
	for (size_t i = 0; i < n; i++)
		if (strchr("_/=()[]:%^0123456789", w[i]) || (w[i] == '.' && i + 1 < n))
			return 1;
	return 0;
}

static int name_char(int c)
{
	return isalnum(c) || c == '_' || c == '-' || c == '.';
}

/* One whitespace-separated word of running text, with its markup: NAME(N)
 * and function() in bold with the parentheses in roman; tunables and PyTorch
 * keys in bold when they hold an underscore (a bare "mmap" or "trace" is an
 * ordinary word as often as a name). */
static void put_word(FILE *f, const char *w, size_t n)
{
	unsigned flags = (word_is_code(w, n) ? ESC_CODE : 0) | ESC_BREAK;
	size_t a = 0, b = n, e;

	while (a < n && strchr("(\"'[", w[a]))
		a++;
	while (b > a && strchr(",.;:)\"'!?", w[b - 1]))
		b--;
	/* the loop above ate the ")" of "name()" and "name(5)" */
	if (b < n && w[b] == ')' && b > a && (w[b - 1] == '(' || isdigit((unsigned char)w[b - 1])))
		b++;
	for (e = a; e < b && name_char((unsigned char)w[e]);)
		e++;
	while (e > a && w[e - 1] == '.')
		e--;

	int section_ref = e > a && b - e >= 3 && w[e] == '(' && isdigit((unsigned char)w[e + 1]) &&
			  w[b - 1] == ')';
	int call = e > a && b - e == 2 && w[e] == '(' && w[e + 1] == ')';
	int name = e > a && e == b && memchr(w + a, '_', e - a) &&
		   (is_tunable(w + a, e - a) || is_compat(w + a, e - a));

	/* a name broken with a hyphen reads as another name */
	if (flags & ESC_CODE || section_ref || call || name)
		fputs("\\%", f);
	if (!section_ref && !call && !name) {
		put_chars(f, w, n, flags);
		return;
	}
	put_chars(f, w, a, flags);
	fputs("\\fB", f);
	put_chars(f, w + a, e - a, flags | ESC_CODE);
	fputs("\\fR", f);
	put_chars(f, w + e, n - e, flags | ESC_CODE);
}

static int is_abbreviation(const char *w, size_t n)
{
	return (n == 4 && (memcmp(w, "e.g.", 4) == 0 || memcmp(w, "i.e.", 4) == 0)) ||
	       (n == 3 && memcmp(w, "cf.", 3) == 0);
}

/* A paragraph of running text, ending in a newline: a new source line for
 * each sentence (the roff convention, and what makes groff space sentences),
 * no line starting with a control character. */
static void put_paragraph(FILE *f, const char *s, size_t n)
{
	size_t i = 0;
	int line_start = 1;

	while (i < n && isspace((unsigned char)s[i]))
		i++;
	while (i < n) {
		size_t j = i, k;

		while (j < n && !isspace((unsigned char)s[j]))
			j++;
		if (line_start && (s[i] == '.' || s[i] == '\''))
			fputs("\\&", f);
		put_word(f, s + i, j - i);
		for (k = j; k < n && isspace((unsigned char)s[k]);)
			k++;
		if (k == n)
			break;

		char last = s[j - 1];
		if ((last == '"' || last == ')') && j - i > 1)
			last = s[j - 2];
		line_start = strchr(".?!", last) && !is_abbreviation(s + i, j - i) &&
			     isupper((unsigned char)s[k]);
		fputc(line_start ? '\n' : ' ', f);
		i = k;
	}
	fputc('\n', f);
}

/* A one-line text as a sentence: capital first letter, final full stop. */
static void put_sentence(FILE *f, const char *s)
{
	size_t n = strlen(s);
	char *copy = xmalloc(n + 2);

	memcpy(copy, s, n + 1);
	if (n && islower((unsigned char)copy[0]))
		copy[0] = (char)toupper((unsigned char)copy[0]);
	if (n && !strchr(".?!", copy[n - 1]))
		strcpy(copy + n, ".");
	put_paragraph(f, copy, strlen(copy));
	free(copy);
}

/* The long description: paragraphs are separated by a blank line.  sep is
 * the request that starts each paragraph after the first. */
static void put_description(FILE *f, const char *doc, const char *sep)
{
	const char *p = doc;

	for (int first = 1; *p; first = 0) {
		const char *end = strstr(p, "\n\n");
		size_t n = end ? (size_t)(end - p) : strlen(p);

		if (!first)
			fprintf(f, "%s\n", sep);
		put_paragraph(f, p, n);
		if (!end)
			break;
		for (p = end; *p == '\n';)
			p++;
	}
}

/* ---- values, types and ranges in words ----------------------------------- */

static int is_number(const char *s)
{
	int digits = 0;

	for (; *s; s++) {
		if (isdigit((unsigned char)*s))
			digits++;
		else if (*s != '.')
			return 0;
	}
	return digits > 0;
}

/* A bound of a size range in words, as roff: "20M" is "20 MiB". */
static char *bound_words(const char *v, const struct tunable_def *t)
{
	size_t n = strlen(v);
	char buf[160];

	if (t->type == TT_SIZE && n > 1 && n < 64 && strchr("KMGT", v[n - 1])) {
		char *num = xstrndup(v, n - 1);
		int ok = is_number(num);

		if (ok)
			snprintf(buf, sizeof buf, "%s\\~%ciB", num, v[n - 1]);
		free(num);
		if (ok)
			return xstrdup(buf);
	}
	if (t->type == TT_SIZE && is_number(v) && strcmp(v, "0") != 0 && n < 64) {
		snprintf(buf, sizeof buf, "%s\\~%s", v, (t->flags & T_MIB) ? "MiB" : "bytes");
		return xstrdup(buf);
	}
	if (is_number(v))
		return xstrdup(v);
	if (v[0] == '-' && is_number(v + 1) && n < 64) {
		snprintf(buf, sizeof buf, "\\-%s", v + 1);
		return xstrdup(buf);
	}
	warn("%s: bad bound '%s' in range '%s'", t->name, v, t->range);
	return xstrdup("?");
}

static void put_type(FILE *f, const struct tunable_def *t)
{
	fprintf(f, "\\fI%s\\fR", tunable_type_name(t->type));
	if (t->type == TT_SIZE)
		fputs((t->flags & T_MIB) ? ", a bare number in MiB" : ", a bare number in bytes", f);
	if (t->flags & T_DIVISIONS)
		fputs(" of divisions: \\fIN\\fR, or "
		      "\\fB[\\fIMiB\\fB:\\fIN\\fB,\\fR...\\fB,>:\\fIN\\fB]\\fR",
		      f);
}

static void put_default(FILE *f, const struct tunable_def *t)
{
	if (!*t->defval) {
		fputs("empty", f);
		return;
	}
	fputs("\\fB", f);
	put_chars(f, t->defval, strlen(t->defval), ESC_CODE | ESC_BREAK);
	fputs("\\fR", f);
	if (t->type == TT_SIZE && (t->flags & T_MIB) && is_number(t->defval))
		fputs("\\~MiB", f);
}

/* Whether put_range has anything to say. */
static int has_range(const struct tunable_def *t)
{
	switch (t->type) {
	case TT_BOOL:
	case TT_ENUM:
		return 1;
	case TT_INT:
	case TT_FLOAT:
	case TT_SIZE:
		return *t->range || (t->flags & (T_AUTO | T_UNLIMITED));
	default:
		return 0;
	}
}

static void put_interval(FILE *f, const struct tunable_def *t)
{
	const char *r = t->range;
	size_t n = strlen(r);
	const char *comma = strchr(r, ',');

	if (n < 3 || !strchr("[(", r[0]) || !strchr("])", r[n - 1]) || !comma) {
		warn("%s: bad range '%s' (expected an interval such as [0,1))", t->name, r);
		put_chars(f, r, n, ESC_CODE);
		return;
	}

	char *lo = xstrndup(r + 1, (size_t)(comma - r - 1));
	char *hi = xstrndup(comma + 1, (size_t)(r + n - 1 - comma - 1));
	int lo_incl = r[0] == '[', hi_incl = r[n - 1] == ']';
	char *wlo = *lo ? bound_words(lo, t) : NULL, *whi = *hi ? bound_words(hi, t) : NULL;

	if (wlo && whi && lo_incl && hi_incl)
		fprintf(f, "from %s to %s", wlo, whi);
	else if (wlo && !(t->type == TT_SIZE && strcmp(lo, "0") == 0 && lo_incl && !whi)) {
		fprintf(f, "%s %s", lo_incl ? "at least" : "greater than", wlo);
		if (whi)
			fprintf(f, " and %s %s", hi_incl ? "at most" : "less than", whi);
	} else if (whi)
		fprintf(f, "%s %s", hi_incl ? "at most" : "less than", whi);
	else
		fputs(t->type == TT_SIZE ? "any size" : "any number", f);
	free(lo);
	free(hi);
	free(wlo);
	free(whi);
}

/* The accepted values in words, as one phrase. */
static void put_range(FILE *f, const struct tunable_def *t)
{
	int said = 0;

	if (t->type == TT_BOOL) {
		fputs("\\fBtrue\\fR or \\fBfalse\\fR (also yes/no, on/off, 1/0, in any case)", f);
		return;
	}
	if (t->type == TT_ENUM) {
		const char *p = t->range;

		if (!*p) {
			warn("%s: an enum without values", t->name);
			fputs("(none listed)", f);
			return;
		}
		fputs("one of ", f);
		for (int i = 0; *p; i++) {
			size_t len = strcspn(p, "|");

			fputs(i ? ", \\fB" : "\\fB", f);
			put_chars(f, p, len, ESC_CODE);
			fputs("\\fR", f);
			p += len;
			if (*p == '|')
				p++;
		}
		return;
	}
	if (*t->range) {
		put_interval(f, t);
		said = 1;
	}
	if (t->flags & T_AUTO) {
		fputs(said ? ", or \\fBauto\\fR" : "\\fBauto\\fR", f);
		said = 1;
	}
	if (t->flags & T_UNLIMITED)
		fputs(said ? ", or \\fBunlimited\\fR" : "\\fBunlimited\\fR", f);
}

static const char *example_value(const struct tunable_def *t)
{
	static char buf[128];

	for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++)
		if (strcmp(examples[i].name, t->name) == 0)
			return examples[i].value;
	if (t->type == TT_BOOL)
		return strcmp(t->defval, "true") == 0 ? "false" : "true";
	if (t->type == TT_ENUM) {
		/* the alternative after the default, to show a change */
		const char *p = t->range;

		while (*p) {
			size_t len = strcspn(p, "|");
			int is_default = len == strlen(t->defval) && memcmp(p, t->defval, len) == 0;

			p += len;
			if (*p == '|')
				p++;
			if (is_default)
				break;
		}
		if (!*p)
			p = t->range;
		snprintf(buf, sizeof buf, "%.*s", (int)strcspn(p, "|"), p);
		return buf;
	}
	if (!*t->defval) {
		warn("%s: no example value; add one to examples[] in mkman.c", t->name);
		return "value";
	}
	return t->defval;
}

/* Whether s needs no quoting in a POSIX shell command line. */
static int shell_safe(const char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("_.,:/=+-@%", *s))
			return 0;
	return 1;
}

/* ---- devcache.conf(5): the generated sections -------------------------- */

static const char *const group_titles[G_COUNT] = {
	[G_ALLOCATOR] = "Allocator",
	[G_MODEL_CACHE] = "Model cache",
	[G_BACKENDS] = "Backends",
	[G_LOGGING] = "Logging",
};

/* The backend module that declares t, or NULL for the core. */
static const char *module_of(const struct tunable_def *t)
{
	return doc_tunable_module[t - doc_tunable_defs];
}

static void put_conf_tunable(FILE *f, const struct tunable_def *t)
{
	fputs(".TP\n.B ", f);
	put_code(f, t->name, ESC_ARG);
	fputc('\n', f);
	put_sentence(f, t->summary);
	if (module_of(t))
		fprintf(f, ".br\nDeclared by the\n.B %s\nbackend module.\n", module_of(t));
	fputs(".br\nType: ", f);
	put_type(f, t);
	fputs(".\nDefault: ", f);
	put_default(f, t);
	fputs(".\n", f);
	if (has_range(t) && t->type != TT_BOOL) {
		fputs("Accepted: ", f);
		put_range(f, t);
		fputs(".\n", f);
	}
	fputs(".IP\n", f);
	put_description(f, t->doc, ".IP");
	if (t->flags & T_PENDING)
		fputs(".IP\n" PENDING_NOTE "\n", f);
}

static void put_conf_tunables(FILE *f)
{
	for (int g = 0; g < G_COUNT; g++) {
		int any = 0;

		for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++) {
			if (doc_tunable_defs[i].group != (enum tunable_group)g)
				continue;
			if (!any)
				fprintf(f, ".SS %s\n", group_titles[g]);
			any = 1;
			put_conf_tunable(f, &doc_tunable_defs[i]);
		}
	}
}

static void put_conf_compat(FILE *f)
{
	for (size_t i = 0; i < compat_count; i++) {
		fputs(".TP\n.B ", f);
		put_code(f, compat_defs[i].name, ESC_ARG);
		fputc('\n', f);
		put_sentence(f, compat_defs[i].note);
	}
}

/* Copies the template, putting the generated sections at their markers. */
static void put_substituted(FILE *f, const char *line);

static void write_conf(const char *template_path, const char *outdir)
{
	FILE *in = fopen(template_path, "r");
	struct outfile o;
	char line[4096];
	int seen_tunables = 0, seen_compat = 0;
	unsigned lineno = 0;

	if (!in)
		die("%s: %s", template_path, strerror(errno));
	out_open(&o, outdir, "devcache.conf.5");
	while (fgets(line, sizeof line, in)) {
		size_t n = strlen(line);

		lineno++;
		if (n && line[n - 1] != '\n' && !feof(in))
			die("%s:%u: line too long", template_path, lineno);
		line[strcspn(line, "\n")] = '\0';
		if (strcmp(line, MARK_TUNABLES) == 0) {
			if (seen_tunables++)
				die("%s:%u: a second tunables marker", template_path, lineno);
			put_conf_tunables(o.f);
		} else if (strcmp(line, MARK_COMPAT) == 0) {
			if (seen_compat++)
				die("%s:%u: a second compat marker", template_path, lineno);
			put_conf_compat(o.f);
		} else
			put_substituted(o.f, line);
	}
	if (ferror(in))
		die("%s: read error", template_path);
	fclose(in);
	if (!seen_tunables)
		die("%s: the line '%s' is missing", template_path, MARK_TUNABLES);
	if (!seen_compat)
		die("%s: the line '%s' is missing", template_path, MARK_COMPAT);
	out_close(&o);
}

/* ---- the sample configuration file ------------------------------------------ */

/* Every tunable commented out with its default, for $(sysconfdir). */
static void write_sample(const char *path)
{
	FILE *f = fopen(path, "w");

	if (!f)
		die("%s: %s", path, strerror(errno));
	fprintf(f,
		"# %s/devcache.conf - system-wide configuration of libdevcache.\n"
		"#\n"
		"# Every program that uses libdevcache reads this file when it opens a\n"
		"# context.  One setting per line, \"key = value\"; \"#\" starts a comment.\n"
		"# Settings here override the built-in defaults and are in turn overridden\n"
		"# by $XDG_CONFIG_HOME/devcache/devcache.conf, the file named by\n"
		"# DEVCACHE_CONF, DEVCACHE_BACKEND_PATH, DEVCACHE_OPTIONS=\"key:value,...\"\n"
		"# and the options a program passes to devcache_open().\n"
		"#\n"
		"# Every tunable is listed below, commented out, with its built-in default\n"
		"# (generated from the tables the library is built from).  \"devcache config\"\n"
		"# prints the values in effect and where each came from, \"devcache config\n"
		"# --check FILE\" checks a file, and devcache.conf(5) and devcache.NAME(5)\n"
		"# (for example devcache.max_split_size_mb(5)) describe them.\n",
		param("sysconfdir"));
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++) {
		const struct tunable_def *t = &doc_tunable_defs[i];

		fprintf(f, "\n# %s.", t->summary);
		if (module_of(t))
			fprintf(f, "\n# Declared by the %s backend module: known where it is installed.",
				module_of(t));
		fprintf(f, "\n#%s =%s%s\n", t->name, *t->defval ? " " : "", t->defval);
	}
	if (ferror(f) | fclose(f))
		die("%s: write error", path);
}

/* ---- the hand-written pages ------------------------------------------------ */

/* A line of a page with its @NAME@ placeholders replaced.  The values are
 * paths and versions from the build, so they are escaped for roff like any
 * other name: a hyphen in a prefix is a minus sign, and a long path gets
 * break points, so that no install prefix can make a line unbreakable. */
static void put_substituted(FILE *f, const char *line)
{
	const char *p = line;

	while (*p) {
		const char *end = *p == '@' ? p + 1 + strspn(p + 1, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
								 "abcdefghijklmnopqrstuvwxyz_")
					    : NULL;
		const char *v = end && *end == '@' ? subst_value(p + 1, (size_t)(end - p - 1)) : NULL;

		if (v) {
			put_code(f, v, ESC_ARG | ESC_BREAK);
			p = end + 1;
		} else
			fputc(*p++, f);
	}
	fputc('\n', f);
}

static void write_substituted(const char *in_path, const char *out_path)
{
	FILE *in = fopen(in_path, "r");
	struct outfile o;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	if (!in)
		die("%s: %s", in_path, strerror(errno));
	o.path = xstrdup(out_path);
	o.tmp = xmalloc(strlen(out_path) + sizeof ".tmp");
	sprintf(o.tmp, "%s.tmp", out_path);
	if (!(o.f = fopen(o.tmp, "w")))
		die("%s: %s", o.tmp, strerror(errno));
	while ((n = getline(&line, &cap, in)) >= 0) {
		line[strcspn(line, "\n")] = '\0';
		put_substituted(o.f, line);
	}
	if (ferror(in))
		die("%s: read error", in_path);
	free(line);
	fclose(in);
	out_close(&o);
}

/* ---- devcache.NAME(5) ----------------------------------------------------- */

static void put_upper(FILE *f, const char *s)
{
	for (; *s; s++)
		fputc(toupper((unsigned char)*s), f);
}

/* The NAME line's description starts in lower case, unless its first word
 * is a name such as "PyTorch" or "CUDA". */
static void put_name_summary(FILE *f, const char *s)
{
	char *copy = xstrdup(s);
	size_t w = strcspn(copy, " ");
	int plain = isupper((unsigned char)copy[0]) != 0;

	for (size_t i = 1; i < w && plain; i++)
		plain = islower((unsigned char)copy[i]) != 0;
	if (plain)
		copy[0] = (char)tolower((unsigned char)copy[0]);
	put_paragraph(f, copy, strlen(copy));
	free(copy);
}

static void put_example(FILE *f, const char *line, const char *more)
{
	fputs(".PP\n.in +4n\n.EX\n", f);
	put_code(f, line, 0);
	if (more) {
		fputs(" \\e\n    ", f);
		put_code(f, more, 0);
	}
	fputs("\n.EE\n.in\n", f);
}

static void put_tunable_synopsis(FILE *f, const struct tunable_def *t)
{
	fputs(".SH SYNOPSIS\nIn\n.BR devcache.conf (5):\n.PP\n.RS\n.B ", f);
	put_code(f, t->name, ESC_ARG);
	fputs(" =\n.I value\n.RE\n", f);
	fputs(".PP\nIn the environment:\n.PP\n.RS\n.BI DEVCACHE_OPTIONS=", f);
	put_code(f, t->name, ESC_ARG);
	fputs(": value\n.RE\n", f);
	fputs(".PP\nIn the option string of\n.B devcache \\-o\nand\n.BR devcache_open ():\n"
	      ".PP\n.RS\n.BI ",
	      f);
	put_code(f, t->name, ESC_ARG);
	fputs(": value\n.RE\n", f);
}

static void put_tunable_value(FILE *f, const struct tunable_def *t)
{
	/* a table: the tags fit the indent, no space between the items */
	fputs(".SH VALUE\n.PD 0\n.TP 18n\n.B Type\n", f);
	put_type(f, t);
	fputs("\n.TP\n.B Default\n", f);
	put_default(f, t);
	fputc('\n', f);
	if (has_range(t)) {
		fputs(".TP\n.B Accepted values\n", f);
		put_range(f, t);
		fputc('\n', f);
	}
	fprintf(f, ".TP\n.B Group\n%s\n.PD\n", tunable_group_name(t->group));
}

static void put_tunable_environment(FILE *f, const struct tunable_def *t)
{
	fputs(".SH ENVIRONMENT\n", f);
	for (size_t i = 0; i < sizeof tunable_env / sizeof tunable_env[0]; i++) {
		if (strcmp(tunable_env[i].name, t->name) != 0)
			continue;
		fprintf(f, ".TP\n.B %s\n", tunable_env[i].variable);
		put_paragraph(f, tunable_env[i].text, strlen(tunable_env[i].text));
	}
	fputs(".TP\n.B DEVCACHE_OPTIONS\nAn option string;\n.BI ", f);
	put_code(f, t->name, ESC_ARG);
	fputs(": value\nin it sets this tunable over every configuration file.\n", f);
	fputs(".TP\n.B DEVCACHE_CONF\n"
	      "The name of a configuration file, read after the system and user files.\n",
	      f);
}

static void put_tunable_examples(FILE *f, const struct tunable_def *t)
{
	const char *v = example_value(t);
	size_t n = strlen(t->name) + strlen(v) + 64;
	char *line = xmalloc(n);
	const char *q = shell_safe(v) ? "" : "'";

	fputs(".SH EXAMPLES\nIn a configuration file:\n", f);
	snprintf(line, n, "%s = %s", t->name, v);
	put_example(f, line, NULL);
	fputs(".PP\nFor one run of a program; here the program is\n.BR devcache (1),\n"
	      "which shows the value and where it came from:\n",
	      f);
	snprintf(line, n, "$ DEVCACHE_OPTIONS=%s%s:%s%s", q, t->name, v, q);
	/* an example fits an 80-column terminal, indented */
	if (strlen(line) + strlen(" devcache config") > 66)
		put_example(f, line, "devcache config");
	else {
		strcat(line, " devcache config");
		put_example(f, line, NULL);
	}
	free(line);
}

static void write_tunable_page(const char *outdir, const struct tunable_def *t, FILE *list)
{
	struct outfile o;
	char *name = path_join("devcache", t->name, ".5");
	FILE *f;

	name[strlen("devcache")] = '.';
	out_open(&o, outdir, name);
	f = o.f;
	fprintf(f, ".\\\" %s - generated by mkman from %s%s/tunables.def; do not edit.\n", name,
		module_of(t) ? "backends/" : "", module_of(t) ? module_of(t) : "lib");
	/* The header and footer of every page, as the hand-written pages have
	 * them: the date written as they write it (put_substituted), the
	 * project's centre header.  The title is the tunable's name without
	 * "devcache.": on an 80-column terminal (78 columns of text) the
	 * header holds the title twice with the centre header between them,
	 * and DEVCACHE.GARBAGE_COLLECTION_THRESHOLD(5) twice would not fit
	 * even alone.  The NAME section below gives the whole name. */
	static const char centre[] = "libdevcache";
	size_t title = strlen("(5)") + strlen(t->name);
	if (2 * title + strlen(centre) + 4 > 78 ||
	    title + (78 + strlen(param("MAN_DATE"))) / 2 + 1 > 78) {
		fprintf(stderr, "mkman: %s: the title %s(5) is too long for an 80-column header\n",
			name, t->name);
		exit(EXIT_FAILURE);
	}
	fputs(".TH ", f);
	put_upper(f, t->name);
	fputs(" 5 \"", f);
	put_code(f, param("MAN_DATE"), ESC_ARG | ESC_BREAK);
	fprintf(f, "\" \"libdevcache %s\" \"%s\"\n", param("VERSION"), centre);
	/* as in the hand-written pages: no hyphenated names, ragged right */
	fputs(".nr HY 0\n.nh\n.ad l\n", f);

	fputs(".SH NAME\ndevcache.", f);
	put_code(f, t->name, 0);
	fputs(" \\- ", f);
	put_name_summary(f, t->summary);

	put_tunable_synopsis(f, t);
	put_tunable_value(f, t);

	fputs(".SH DESCRIPTION\n", f);
	put_description(f, t->doc, ".PP");
	if (t->flags & T_PENDING)
		fputs(".PP\n" PENDING_NOTE "\n", f);
	if (module_of(t))
		fprintf(f,
			".PP\nThis tunable is declared by the\n.B %s\nbackend module, not by the "
			"library:\nit can be set, and\n.B devcache config\nlists it, where that "
			"module is installed\nand loaded; see\n.BR devcache\\-%s (7).\n",
			module_of(t), module_of(t));
	fputs(".PP\nThe syntax of values, the order in which sources override each other and\n"
	      "the errors a bad value causes are described in\n.BR devcache.conf (5).\n",
	      f);

	put_tunable_environment(f, t);

	fputs(".SH FILES\n.TP\n.I ", f);
	put_code(f, param("sysconfdir"), ESC_ARG | ESC_BREAK);
	fputs("/devcache.conf\nThe system configuration file.\n", f);
	fputs(".TP\n.I ~/.config/devcache/devcache.conf\n"
	      "The user's configuration file; under\n.B $XDG_CONFIG_HOME\nwhen that is set.\n",
	      f);

	put_tunable_examples(f, t);

	fputs(".SH SEE ALSO\n.BR devcache (1),\n.BR libdevcache (3),\n.BR devcache.conf (5)", f);
	if (module_of(t))
		fprintf(f, ",\n.BR devcache\\-%s (7)", module_of(t));
	fputc('\n', f);
	out_close(&o);
	fprintf(list, "%s\n", name);
	free(name);
}

/* ---- main ------------------------------------------------------------------ */

/* What the pages need of the table, and of the tables above. */
static void check_table(void)
{
	for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++)
		if (!is_tunable(examples[i].name, strlen(examples[i].name)))
			warn("examples[] names '%s', which is not a tunable", examples[i].name);
	for (size_t i = 0; i < sizeof tunable_env / sizeof tunable_env[0]; i++)
		if (!is_tunable(tunable_env[i].name, strlen(tunable_env[i].name)))
			warn("tunable_env[] names '%s', which is not a tunable", tunable_env[i].name);
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++) {
		const struct tunable_def *t = &doc_tunable_defs[i];

		if (!*t->summary || !*t->doc)
			warn("%s: the summary or the description is empty", t->name);
		if (t->type == TT_ENUM && !enum_has(t->range, t->defval))
			warn("%s: the default '%s' is not one of '%s'", t->name, t->defval, t->range);
		if (*t->range && t->type != TT_ENUM && t->type != TT_INT && t->type != TT_FLOAT &&
		    t->type != TT_SIZE)
			warn("%s: only numeric and enum tunables have a range", t->name);
	}
	for (size_t i = 0; i < compat_count; i++)
		if (!*compat_defs[i].note)
			warn("%s: a PyTorch key without a note", compat_defs[i].name);
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s [-s NAME=VALUE]... -t TEMPLATE -o OUTDIR\n"
		"       %s [-s NAME=VALUE]... -i PAGE.in -O PAGE\n"
		"       %s [-s NAME=VALUE]... -c devcache.conf\n"
		"The first form writes devcache.conf.5 (TEMPLATE with the tunables filled\n"
		"in), one devcache.NAME.5 per tunable and tunable-pages.list, the list of\n"
		"those pages, into OUTDIR.  The second copies a hand-written page.  Both\n"
		"replace @NAME@ by VALUE, escaped for roff; the tunable pages use VERSION,\n"
		"MAN_DATE and sysconfdir.  The third writes the sample configuration file,\n"
		"every tunable commented out with its default.\n",
		progname, progname, progname);
}

static void add_subst(const char *arg)
{
	const char *eq = strchr(arg, '=');

	if (!eq || eq == arg || n_substs == MAX_SUBSTS)
		die("-s %s: expected NAME=VALUE (at most %d)", arg, MAX_SUBSTS);
	substs[n_substs].name = xstrndup(arg, (size_t)(eq - arg));
	substs[n_substs++].value = eq + 1;
}

int main(int argc, char **argv)
{
	const char *template_path = NULL, *outdir = NULL, *in_path = NULL, *out_path = NULL,
		   *sample = NULL;
	struct outfile list;
	int c;

	while ((c = getopt(argc, argv, "s:t:o:i:O:c:h")) != -1) {
		switch (c) {
		case 's': add_subst(optarg); break;
		case 't': template_path = optarg; break;
		case 'o': outdir = optarg; break;
		case 'i': in_path = optarg; break;
		case 'O': out_path = optarg; break;
		case 'c': sample = optarg; break;
		case 'h': usage(stdout); return EXIT_SUCCESS;
		default: usage(stderr); return EXIT_FAILURE;
		}
	}
	if (optind != argc || !template_path != !outdir || !in_path != !out_path ||
	    !!template_path + !!in_path + !!sample != 1) {
		usage(stderr);
		return EXIT_FAILURE;
	}
	if (sample) {
		check_table();
		write_sample(sample);
		return EXIT_SUCCESS;
	}
	if (in_path) {
		write_substituted(in_path, out_path);
		return EXIT_SUCCESS;
	}

	check_table();
	out_open(&list, outdir, "tunable-pages.list");
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++)
		write_tunable_page(outdir, &doc_tunable_defs[i], list.f);
	write_conf(template_path, outdir);
	out_close(&list);
	return EXIT_SUCCESS;
}
