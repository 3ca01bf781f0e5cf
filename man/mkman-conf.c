/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mkman-conf.c - devcache.conf(5) from its template with the tunables filled in, and the sample devcache.conf. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mkman.h"

/* The template holds the hand-written text; these comment lines mark where
 * the generated sections go.  Being roff comments, they leave a template
 * that was never expanded a valid page. */
#define MARK_TUNABLES ".\\\" mkman: tunables"
#define MARK_COMPAT ".\\\" mkman: compat"

/* ---- devcache.conf(5): the generated sections -------------------------- */

static const char *const group_titles[G_COUNT] = {
	[G_ALLOCATOR] = "Allocator",
	[G_MODEL_CACHE] = "Model cache",
	[G_BACKENDS] = "Backends",
	[G_LOGGING] = "Logging",
};

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
		char text[512];

		snprintf(text, sizeof text, "Any value but %s: %s", compat_defs[i].pytorch_default,
			 compat_defs[i].note);
		put_sentence(f, text);
	}
}
void write_conf(const char *template_path, const char *outdir)
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
void write_sample(const char *path)
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
