/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-i18n.c - the German catalogue: complete, used by the library and by the devcache tool. */
#include "config.h"

#include "tap.h"

#include <locale.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>
#include <wchar.h>

#include <devcache.h>

#include "spawn.h"

/* The locale the German tests run in: a real German one where the machine has
 * it, otherwise C.UTF-8 with LANGUAGE=de, which glibc honours too. */
static const char *locale_name;

static void need_locale(void)
{
	if (!locale_name)
		skip_because("neither de_DE.UTF-8 nor C.UTF-8 is available");
}

static void catalogue_is_complete(void **state)
{
	const char *po = test_env("TEST_PODIR");
	char cmd[4096], line[512], all[4096] = "";
	FILE *p;

	(void)state;
	if (system("xgettext --version >/dev/null 2>&1 && msgmerge --version >/dev/null 2>&1") != 0)
		skip_because("xgettext or msgmerge is not installed");
	/* Extract the messages afresh (the keywords of po/Makevars): a message
	 * added to the sources and not yet to de.po must fail this test. */
	snprintf(cmd, sizeof cmd,
		 "cd '%s/..' && LC_ALL=C LANGUAGE= xgettext --language=C --from-code=UTF-8 "
		 "--keyword=_ --keyword=N_ --files-from=po/POTFILES.in -o - | "
		 "LC_ALL=C LANGUAGE= msgmerge --quiet po/de.po - -o - | "
		 "LC_ALL=C LANGUAGE= msgfmt -c --statistics -o /dev/null - 2>&1",
		 po);
	assert_non_null(p = popen(cmd, "r"));
	while (fgets(line, sizeof line, p))
		strncat(all, line, sizeof all - strlen(all) - 1);
	assert_int_equal(pclose(p), 0);
	assert_contains(all, "translated message");
	if (strstr(all, "fuzzy") || strstr(all, "untranslated"))
		fail_msg("po/de.po is incomplete: %s(run make update-po and translate)", all);
}

/* A file whose messages xgettext never sees stays English for ever. */
static void every_file_with_messages_is_listed(void **state)
{
	const char *po = test_env("TEST_PODIR");
	char cmd[4096], line[512];
	char *listed = NULL;
	FILE *p;

	(void)state;
	snprintf(cmd, sizeof cmd, "%s/POTFILES.in", po);
	listed = test_slurp_must(cmd);
	snprintf(cmd, sizeof cmd,
		 "cd '%s/..' && grep -l -E '(^|[^A-Za-z0-9_])N?_\\(\"' lib/*.c lib/*.def tools/*.c "
		 "backends/*/*.c backends/*.h",
		 po);
	assert_non_null(p = popen(cmd, "r"));
	int n = 0;
	while (fgets(line, sizeof line, p)) {
		char want[600];

		line[strcspn(line, "\n")] = '\0';
		snprintf(want, sizeof want, "\n%s\n", line);
		if (!strstr(listed, want))
			fail_msg("%s has translatable messages but is not in po/POTFILES.in", line);
		n++;
	}
	assert_int_equal(pclose(p), 0);
	assert_true(n > 10);
	free(listed);
}

static void library_messages_are_german(void **state)
{
	devcache_ctx_t *ctx;

	(void)state;
	need_locale();
	assert_string_equal(devcache_strerror(DEVCACHE_ENOMEM), "Speicher erschöpft");
	assert_string_equal(devcache_strerror(DEVCACHE_ECONFIG), "Konfigurationsfehler");
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .options = "max_split_size_mb:abc",
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV};
	assert_int_equal(devcache_open_ex(&ctx, &args), DEVCACHE_ECONFIG);
	assert_contains(devcache_last_error(),
			"devcache_open: max_split_size_mb: ungültige Größe „abc“ (erwartet:");
}

/* The backend modules are shared objects of their own: their messages must
 * come from the library's catalogue too (the cuda module, its driver
 * missing, says why it has no device). */
static void backend_messages_are_german(void **state)
{
	char opts[8192], module[4096];
	devcache_ctx_t *ctx;
	devcache_backend_info_t b;
	devcache_open_args_t args = {.struct_size = sizeof args,
				     .options = opts,
				     .flags = DEVCACHE_OPEN_NO_FILES | DEVCACHE_OPEN_NO_ENV};
	bool found = false;

	(void)state;
	need_locale();
	snprintf(module, sizeof module, "%s", test_env("TEST_BACKENDS"));
	module[strcspn(module, ":")] = '\0';
	strncat(module, "/cuda.so", sizeof module - strlen(module) - 1);
	if (access(module, R_OK) != 0)
		skip_because("the cuda backend is not built (configure found no cuda.h)");
	snprintf(opts, sizeof opts,
		 "log_level:error,backend_path:%s,backends:cuda,cuda_library:/nonexistent/libcuda.so.1",
		 test_env("TEST_BACKENDS"));
	if (devcache_open_ex(&ctx, &args))
		fail_msg("devcache_open_ex(%s): %s", opts, devcache_last_error());
	for (size_t i = 0; i < devcache_backend_count(ctx); i++)
		if (devcache_backend_info(ctx, i, &b) == 0 && strcmp(b.name, "cuda") == 0) {
			found = true;
			assert_int_equal(b.device_count, 0);
			assert_contains(b.reason, "der CUDA-Treiber konnte nicht geladen werden: ");
		}
	assert_true(found);
	devcache_close(ctx);
}

/* Lines of text wider than cols, in display columns, each as a problem. */
static int too_wide(const char *what, const char *text, int cols)
{
	int bad = 0;

	for (const char *line = text; *line;) {
		size_t len = strcspn(line, "\n");
		char buf[1024];
		wchar_t wide[1024];
		int width;

		snprintf(buf, sizeof buf, "%.*s", (int)len, line);
		if (mbstowcs(wide, buf, sizeof wide / sizeof *wide) == (size_t)-1)
			fail_msg("%s: not valid in the locale: %s", what, buf);
		width = wcswidth(wide, wcslen(wide));
		if (width > cols) {
			printf("# %s: %d columns: %s\n", what, width, buf);
			bad++;
		}
		line += len + (line[len] == '\n');
	}
	return bad;
}

/* The German --help of the tool and of each of its commands fits an
 * 80-column terminal.  The commands are those `devcache --help` lists,
 * so a command added later is covered without a change here. */
static void german_help_fits_80_columns(void **state)
{
	char lc_all[64], cmds[32][16];
	const char *env[] = {"LANGUAGE=de", lc_all, NULL};
	struct result *r = malloc(sizeof *r);
	int n = 0, bad = 0, checked = 0, failed = 0;
	bool listing = false;

	(void)state;
	need_locale();
	assert_non_null(r);
	snprintf(lc_all, sizeof lc_all, "LC_ALL=%s", locale_name);
	spawn_tool(r, env, (const char *const[]){"--help", NULL});
	assert_int_equal(r->status, 0);
	assert_contains(r->out, "Aufruf:");
	bad += too_wide("devcache --help", r->out, 80);
	/* The list of commands: the first heading ("Befehle:"), then lines
	 * "  NAME  what it does" up to a blank line. */
	for (char *line = r->out, *end; *line && n < 32; line = end + (*end != '\0')) {
		end = line + strcspn(line, "\n");
		if (!listing && line[0] != ' ' && end > line && end[-1] == ':' &&
		    !strncmp(line, "Befehle", 7))
			listing = true;
		else if (listing && end == line)
			break;
		else if (listing && line[0] == ' ' && line[1] == ' ' && line[2] != ' ') {
			size_t len = strcspn(line + 2, " \n");
			bool seen = false;

			for (int k = 0; k < n; k++)
				seen = seen || (strlen(cmds[k]) == len && !strncmp(cmds[k], line + 2, len));
			if (!seen && len < sizeof cmds[0])
				snprintf(cmds[n++], sizeof cmds[0], "%.*s", (int)len, line + 2);
		}
	}
	assert_true(n >= 5);
	for (int k = 0; k < n; k++) {
		char what[48];

		spawn_tool(r, env, (const char *const[]){cmds[k], "--help", NULL});
		if (r->status != 0) {
			/* Every command has --help; one that fails is a fault. */
			printf("# devcache %s --help: exit status %d\n%s", cmds[k], r->status,
			       r->err);
			failed++;
			continue;
		}
		snprintf(what, sizeof what, "devcache %.15s --help", cmds[k]);
		bad += too_wide(what, r->out, 80);
		checked++;
	}
	printf("# %d of %d commands' --help checked\n", checked, n);
	free(r);
	if (failed)
		fail_msg("%d command(s) fail their German --help", failed);
	if (bad)
		fail_msg("%d line(s) of the German --help pass 80 columns", bad);
}

static void tool_speaks_german(void **state)
{
	char lc_all[64];
	const char *env[] = {"LANGUAGE=de", lc_all, NULL};
	struct result *r = malloc(sizeof *r);

	(void)state;
	need_locale();
	assert_non_null(r);
	snprintf(lc_all, sizeof lc_all, "LC_ALL=%s", locale_name);
	spawn_tool(r, env, (const char *const[]){"--help", NULL});
	assert_int_equal(r->status, 0);
	assert_contains(r->out, "Aufruf: devcache [OPTION]... BEFEHL [ARG]...");
	spawn_tool(r, env, (const char *const[]){"frobnicate", NULL});
	assert_int_equal(r->status, 2);
	assert_contains(r->err, "„devcache --help“ gibt weitere Informationen.");
	/* The library's messages reach the tool's user in German too. */
	const char *bad[] = {"LANGUAGE=de", lc_all, "DEVCACHE_OPTIONS=max_split_size_mb:abc", NULL};
	spawn_tool(r, bad, (const char *const[]){"config", NULL});
	assert_int_equal(r->status, 2);
	assert_contains(r->err, "DEVCACHE_OPTIONS: max_split_size_mb: ungültige Größe „abc“");
	/* A decimal comma in the locale changes neither how a float is read
	 * nor how it is written back. */
	const char *fraction[] = {"LANGUAGE=de", lc_all, "DEVCACHE_OPTIONS=memory_fraction:0.25", NULL};
	spawn_tool(r, fraction, (const char *const[]){"config", NULL});
	assert_int_equal(r->status, 0);
	assert_contains(r->out, "0.25");
	assert_not_contains(r->out, "0,25");
	free(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(catalogue_is_complete),
		cmocka_unit_test(every_file_with_messages_is_listed),
		cmocka_unit_test(library_messages_are_german),
		cmocka_unit_test(backend_messages_are_german),
		cmocka_unit_test(tool_speaks_german),
		cmocka_unit_test(german_help_fits_80_columns),
	};

	if (setlocale(LC_ALL, "de_DE.UTF-8")) {
		locale_name = "de_DE.UTF-8";
	} else if (setlocale(LC_ALL, "C.UTF-8")) {
		locale_name = "C.UTF-8";
	}
	setenv("LANGUAGE", "de", 1);
	printf("# German tests run in locale %s\n", locale_name ? locale_name : "(none)");
	return RUN_TAP(tests);
}
