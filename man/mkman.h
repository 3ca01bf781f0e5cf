/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* mkman.h - what mkman's files share: errors and memory, output files, the table, roff writing. */
#ifndef DEVCACHE_MKMAN_H
#define DEVCACHE_MKMAN_H

#include <stddef.h>
#include <stdio.h>

#include "doc-tunables.h"

#define PENDING_NOTE                                                                       \
	"This tunable has no effect yet; it is declared so that configurations can be "     \
	"written now."

/* mkman.c: the substitutions, errors and memory */
const char *param(const char *name);
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void mk_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *xmalloc(size_t n);
char *xstrndup(const char *s, size_t n);
char *xstrdup(const char *s);

/* mkman.c: output files */
/* Pages are written under a temporary name and renamed when complete, so an
 * interrupted build never leaves half a page behind. */
struct outfile {
	FILE *f;
	char *path;
	char *tmp;
};

char *path_join(const char *dir, const char *name, const char *suffix);
void out_open(struct outfile *o, const char *dir, const char *name);
void out_close(struct outfile *o);

/* mkman.c: the table, and the hand-written pages */
int is_tunable(const char *s, size_t n);
int is_compat(const char *s, size_t n);
const char *module_of(const struct tunable_def *t);
void put_substituted(FILE *f, const char *line);

/* mkman-roff.c: roff text */
enum {
	ESC_CODE = 0x1,  /* a name, option, path or value: hyphens are minus signs
			    (\-) and quotes plain ASCII, as a reader types them */
	ESC_ARG = 0x2,   /* inside a macro argument: a double quote is \(dq */
	ESC_BREAK = 0x4, /* filled text: allow a line break after / and , in long words */
};

void put_chars(FILE *f, const char *s, size_t n, unsigned flags);
void put_code(FILE *f, const char *s, unsigned flags);
void put_paragraph(FILE *f, const char *s, size_t n);
void put_sentence(FILE *f, const char *s);
void put_description(FILE *f, const char *doc, const char *sep);
void put_type(FILE *f, const struct tunable_def *t);
void put_default(FILE *f, const struct tunable_def *t);
int has_range(const struct tunable_def *t);
void put_range(FILE *f, const struct tunable_def *t);

/* mkman-conf.c: devcache.conf(5) and the sample configuration file */
void write_conf(const char *template_path, const char *outdir);
void write_sample(const char *path);

/* mkman-tunable.c: devcache.NAME(5), and the checks of the table */
void write_tunable_page(const char *outdir, const struct tunable_def *t, FILE *list);
void check_table(void);

#endif
