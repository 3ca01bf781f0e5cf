/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mkman.c - writes devcache.conf(5) and one devcache.NAME(5) page per tunable from lib/tunables.def, and fills in the @VARIABLES@ of the other pages. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mkman.h"

/*
 * The files: mkman.c the command line, the @NAME@ substitutions, errors,
 * output files, the table's lookups and the hand-written pages;
 * mkman-roff.c roff text: escaping, sentences and paragraphs, and a
 * tunable's type, default and accepted values in words; mkman-conf.c
 * devcache.conf(5)'s generated sections and the sample configuration file;
 * mkman-tunable.c the devcache.NAME(5) pages, with the EXAMPLE and
 * ENVIRONMENT declarations of tunables.def, and the checks of the table.
 */

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

const char *param(const char *name)
{
	const char *v = subst_value(name, strlen(name));

	return v ? v : "";
}

void die(const char *fmt, ...)
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
void mk_warn(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: warning: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of memory");
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

/* ---- output files ------------------------------------------------------ */

char *path_join(const char *dir, const char *name, const char *suffix)
{
	size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 2;
	char *p = xmalloc(n);

	snprintf(p, n, "%s/%s%s", dir, name, suffix);
	return p;
}

void out_open(struct outfile *o, const char *dir, const char *name)
{
	o->path = path_join(dir, name, "");
	o->tmp = path_join(dir, name, ".tmp");
	o->f = fopen(o->tmp, "w");
	if (!o->f)
		die("%s: %s", o->tmp, strerror(errno));
}

void out_close(struct outfile *o)
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

int is_tunable(const char *s, size_t n)
{
	for (size_t i = 0; i < DOC_TUNABLE_COUNT; i++)
		if (strlen(doc_tunable_defs[i].name) == n && memcmp(doc_tunable_defs[i].name, s, n) == 0)
			return 1;
	return 0;
}

int is_compat(const char *s, size_t n)
{
	for (size_t i = 0; i < compat_count; i++)
		if (strlen(compat_defs[i].name) == n && memcmp(compat_defs[i].name, s, n) == 0)
			return 1;
	return 0;
}

/* The backend module that declares t, or NULL for the core. */
const char *module_of(const struct tunable_def *t)
{
	return doc_tunable_module[t - doc_tunable_defs];
}

/* ---- the hand-written pages ------------------------------------------------ */

/* A line of a page with its @NAME@ placeholders replaced.  The values are
 * paths and versions from the build, so they are escaped for roff like any
 * other name: a hyphen in a prefix is a minus sign, and a long path gets
 * break points, so that no install prefix can make a line unbreakable. */
void put_substituted(FILE *f, const char *line)
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

/* ---- main ------------------------------------------------------------------ */

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
