/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-abi.c - the exported symbols: the version script, the headers' DEVCACHE_API declarations and the shared library's dynamic symbols are one set. */
#include "config.h"

#include "tap.h"

#include <ctype.h>
#include <stdbool.h>
#include <dirent.h>
#include <unistd.h>

#define MAX_NAMES 512

struct names {
	size_t n;
	char *v[MAX_NAMES];
};

static void add(struct names *s, const char *start, size_t len)
{
	if (s->n == MAX_NAMES)
		fail_msg("more than %d exported names", MAX_NAMES);
	s->v[s->n] = strndup(start, len);
	assert_non_null(s->v[s->n]);
	s->n++;
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void sort_unique(struct names *s)
{
	size_t k = 0;

	qsort(s->v, s->n, sizeof *s->v, cmp);
	for (size_t i = 0; i < s->n; i++)
		if (k == 0 || strcmp(s->v[k - 1], s->v[i]) != 0)
			s->v[k++] = s->v[i];
		else
			free(s->v[i]);
	s->n = k;
}

static bool has(const struct names *s, const char *name)
{
	return bsearch(&name, s->v, s->n, sizeof *s->v, cmp) != NULL;
}

static void free_names(struct names *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	s->n = 0;
}

/* Sort a and b, fail naming any name one has and the other lacks (the
 * message is before NAME after, one pair of words for each side), free both. */
static void same_names(struct names *a, struct names *b, const char *only_a[2],
		       const char *only_b[2])
{
	sort_unique(a);
	sort_unique(b);
	for (size_t i = 0; i < a->n; i++)
		if (!has(b, a->v[i]))
			fail_msg("%s%s%s", only_a[0], a->v[i], only_a[1]);
	for (size_t i = 0; i < b->n; i++)
		if (!has(a, b->v[i]))
			fail_msg("%s%s%s", only_b[0], b->v[i], only_b[1]);
	free_names(a);
	free_names(b);
}

static char *srcdir_file(const char *rel)
{
	char *path;

	assert_true(asprintf(&path, "%s/../%s", test_env("TEST_SRCDIR"), rel) > 0);
	return path;
}

/* The names of the version script's first global: block, one a line. */
static void map_names(struct names *s, const char **node_p)
{
	char *path = srcdir_file("lib/libdevcache.map");
	char *text = test_slurp_must(path), *line, *save = NULL;
	bool global = false;

	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		while (isspace((unsigned char)*line))
			line++;
		if (strncmp(line, "LIBDEVCACHE_", 12) == 0)
			*node_p = "LIBDEVCACHE_";
		if (strcmp(line, "global:") == 0)
			global = true;
		else if (strcmp(line, "local:") == 0)
			global = false;
		else if (global && *line && *line != '}') {
			size_t len = strcspn(line, ";");

			if (memchr(line, '*', len) || memchr(line, '?', len))
				fail_msg("%s: '%.*s' is a pattern: list every symbol by name", path,
					 (int)len, line);
			add(s, line, len);
		}
	}
	free(text);
	free(path);
}

/* The function after each DEVCACHE_API in one header. */
static void header_names(struct names *s, const char *path)
{
	char *text = test_slurp_must(path);

	for (char *p = strstr(text, "DEVCACHE_API "); p; p = strstr(p + 1, "DEVCACHE_API ")) {
		char *bol = p;

		while (bol > text && bol[-1] != '\n')
			bol--;
		if (strncmp(bol, "#define", 7) == 0) /* the macro's own definition */
			continue;
		char *paren = strchr(p, '('), *end = paren;

		if (!paren || paren - p > 200)
			continue;
		while (end > p && isspace((unsigned char)end[-1]))
			end--;
		char *start = end;
		while (start > p && (isalnum((unsigned char)start[-1]) || start[-1] == '_'))
			start--;
		if (strncmp(start, "DEVCACHE_API", 12) != 0 && end > start)
			add(s, start, (size_t)(end - start));
	}
	free(text);
}

static void all_header_names(struct names *s)
{
	char *dir = srcdir_file("include");
	DIR *d = opendir(dir);
	struct dirent *e;

	assert_non_null(d);
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);

		if (len > 2 && strcmp(e->d_name + len - 2, ".h") == 0) {
			char *path;

			assert_true(asprintf(&path, "%s/%s", dir, e->d_name) > 0);
			header_names(s, path);
			free(path);
		}
	}
	closedir(d);
	free(dir);
}

static void the_map_lists_every_declared_function_by_name(void **state)
{
	struct names map = {0}, hdr = {0};
	const char *node = NULL;

	(void)state;
	map_names(&map, &node);
	all_header_names(&hdr);
	assert_non_null(node);
	sort_unique(&hdr);
	assert_true(hdr.n > 60);
	same_names(&hdr, &map,
		   (const char *[]){"", " is declared DEVCACHE_API but not listed in "
				    "lib/libdevcache.map"},
		   (const char *[]){"lib/libdevcache.map lists ",
				    ", which no installed header declares"});
}

/* What the built library exports (its dynamic symbol table, as nm -D
 * lists it): exactly the map's names and the version node itself. */
static void the_library_exports_exactly_the_map(void **state)
{
	struct names map = {0}, dyn = {0};
	const char *node = NULL;
	char cmd[4096], line[512];
	FILE *p;

	(void)state;
	if (access(TEST_LIBDEVCACHE, R_OK) != 0)
		skip_because("no shared library was built (--disable-shared)");
	snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s' 2>/dev/null", TEST_LIBDEVCACHE);
	if (!(p = popen(cmd, "r")))
		skip_because("nm cannot be run");
	while (fgets(line, sizeof line, p)) {
		char *name = strrchr(line, ' ');

		if (!name)
			continue;
		name++;
		size_t len = strcspn(name, "@\n");
		if (strncmp(name, "LIBDEVCACHE_", 12) != 0)
			add(&dyn, name, len);
	}
	if (pclose(p) != 0 || dyn.n == 0)
		skip_because("nm -D found no symbols (binutils missing?)");
	map_names(&map, &node);
	same_names(&dyn, &map,
		   (const char *[]){"the library exports ",
				    ", which lib/libdevcache.map does not list"},
		   (const char *[]){"", " is in lib/libdevcache.map but the library does not "
				    "export it"});
}

/* debian/libdevcache0.symbols names the same functions, each in the map's
 * node: dpkg-gensymbols would fail the package build otherwise, and only
 * the Debian build would tell. */
static void the_debian_symbols_file_matches_the_map(void **state)
{
	struct names map = {0}, sym = {0};
	const char *node = NULL;
	char *path = srcdir_file("debian/libdevcache0.symbols");
	char *text, *line, *save = NULL;

	(void)state;
	if (access(path, R_OK) != 0) {
		free(path);
		skip_because("no debian/ directory (it is not in the release tarball)");
	}
	text = test_slurp_must(path);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t len;

		if (line[0] != ' ' || strncmp(line + 1, "devcache_", 9) != 0)
			continue; /* the header line, comments, meta-information */
		len = strcspn(line + 1, "@ ");
		if (strncmp(line + 1 + len, "@LIBDEVCACHE_0 ", 15) != 0)
			fail_msg("%s: '%s' is not in the version node LIBDEVCACHE_0", path, line + 1);
		add(&sym, line + 1, len);
	}
	map_names(&map, &node);
	char *lists = NULL, *lacks = NULL;
	assert_true(asprintf(&lacks, "%s does not list ", path) > 0);
	assert_true(asprintf(&lists, "%s lists ", path) > 0);
	same_names(&map, &sym,
		   (const char *[]){lacks, ", which lib/libdevcache.map exports"},
		   (const char *[]){lists, ", which lib/libdevcache.map does not"});
	free(lacks);
	free(lists);
	free(text);
	free(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_map_lists_every_declared_function_by_name),
		cmocka_unit_test(the_library_exports_exactly_the_map),
		cmocka_unit_test(the_debian_symbols_file_matches_the_map),
	};

	return RUN_TAP(tests);
}
