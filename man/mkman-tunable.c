/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mkman-tunable.c - one devcache.NAME(5) page per tunable, and the checks of the table the pages need. */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mkman.h"

/* Values for the EXAMPLES sections where the default would teach nothing,
 * and the environment variables that set one particular tunable: both are
 * declared with the tunable, as EXAMPLE and ENVIRONMENT in its
 * tunables.def.  Other tunables get their default, or for bool and enum
 * another accepted value (see example_value).  check_table() rejects names
 * that are not tunables, so a renamed tunable cannot leave a stale entry. */
#undef TUNABLE
#undef COMPAT
#define TUNABLE(name, type, def, range, flags, group, summary, doc)
#define COMPAT(name, pytorch_default, note)

static const struct {
	const char *name;
	const char *value;
} examples[] = {
#define EXAMPLE(name, value) {#name, value},
#include "../lib/tunables.def"
#include "../backends/modules.h"
#undef EXAMPLE
};

static const struct {
	const char *name;
	const char *variable;
	const char *text;
} tunable_env[] = {
#define ENVIRONMENT(name, variable, text) {#name, variable, text},
#include "../lib/tunables.def"
#include "../backends/modules.h"
#undef ENVIRONMENT
};

#undef TUNABLE
#undef COMPAT

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
		mk_warn("%s: no example value; add an EXAMPLE() line to its tunables.def", t->name);
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

void write_tunable_page(const char *outdir, const struct tunable_def *t, FILE *list)
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

/* ---- the checks of the table ---------------------------------------------- */

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

/* What the pages need of the table, and of the tables above. */
void check_table(void)
{
	for (size_t i = 0; i < sizeof examples / sizeof examples[0]; i++)
		if (!is_tunable(examples[i].name, strlen(examples[i].name)))
			mk_warn("examples[] names '%s', which is not a tunable", examples[i].name);
	for (size_t i = 0; i < sizeof tunable_env / sizeof tunable_env[0]; i++)
		if (!is_tunable(tunable_env[i].name, strlen(tunable_env[i].name)))
			mk_warn("tunable_env[] names '%s', which is not a tunable", tunable_env[i].name);
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++) {
		const struct tunable_def *t = &doc_tunable_defs[i];

		if (!*t->summary || !*t->doc)
			mk_warn("%s: the summary or the description is empty", t->name);
		if (t->type == TT_ENUM && !enum_has(t->range, t->defval))
			mk_warn("%s: the default '%s' is not one of '%s'", t->name, t->defval, t->range);
		if (*t->range && t->type != TT_ENUM && t->type != TT_INT && t->type != TT_FLOAT &&
		    t->type != TT_SIZE)
			mk_warn("%s: only numeric and enum tunables have a range", t->name);
	}
	for (size_t i = 0; i < compat_count; i++)
		if (!*compat_defs[i].note)
			mk_warn("%s: a PyTorch key without a note", compat_defs[i].name);
}
