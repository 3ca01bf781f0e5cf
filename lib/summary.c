/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* summary.c - devcache_summary(): the statistics as the 75-column table of torch.cuda.memory_summary(). */
#include "internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table is built from devcache_stats() alone, so it shows what a program
 * can read itself.  Its words are not translated: the layout is PyTorch's,
 * the labels fit its columns, and scripts that read one table read both. */

#define WIDTH 75       /* between the two '|' of each line */
#define NAME_WIDTH 21  /* the metric column */
#define CELL_BUF 32    /* a value column is 10 wide; this is room to spare */

struct table {
	char text[8192];
	size_t len;
};

static void add(struct table *t, const char *fmt, ...) DEVCACHE_PRINTF(2, 3);

static void add(struct table *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(t->text + t->len, sizeof t->text - t->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		t->len += (size_t)n < sizeof t->text - t->len ? (size_t)n : sizeof t->text - t->len - 1;
}

static void rule(struct table *t, char c)
{
	char line[WIDTH + 1];

	memset(line, c, WIDTH);
	line[WIDTH] = '\0';
	add(t, "|%s|\n", line);
}

/* PyTorch's units: a value is shown in the unit its column's "all" value
 * (pref) calls for, dividing by 1024 while pref is at least 768 KiB... of
 * the current unit.  A value that would still not fit its six digits (only
 * when the statistics contradict each other) moves up further. */
static void cell_size(char *cell, int64_t value, int64_t pref)
{
	static const char *const units[] = {"B  ", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	size_t u = 0;

	while (u + 1 < sizeof units / sizeof *units &&
	       (pref >= 768 * 1024 || value > 999999 || value < -99999)) {
		value /= 1024;
		pref /= 1024;
		u++;
	}
	snprintf(cell, CELL_BUF, "%6" PRId64 " %s", value, units[u]);
}

/* Counts: thousands and millions past 750,000, as PyTorch; further
 * prefixes only keep enormous counts inside the column. */
static void cell_count(char *cell, int64_t value, int64_t pref)
{
	static const char prefixes[] = " KMGTPE";
	size_t p = 0;

	while (p + 2 < sizeof prefixes &&
	       (pref >= 750 * 1000 || value > 9999999 || value < -999999)) {
		value /= 1000;
		pref /= 1000;
		p++;
	}
	snprintf(cell, CELL_BUF, "%7" PRId64 " %c ", value, prefixes[p]);
}

typedef void format_fn(char *cell, int64_t value, int64_t pref);

static void row(struct table *t, const char *name, const devcache_stat_t *s,
		const devcache_stat_t *pref, format_fn *format)
{
	char cells[4][CELL_BUF];

	format(cells[0], s->current, pref->current);
	format(cells[1], s->peak, pref->peak);
	format(cells[2], s->allocated, pref->allocated);
	format(cells[3], s->freed, pref->freed);
	add(t, "| %-*s | %s | %s | %s | %s |\n", NAME_WIDTH, name, cells[0], cells[1], cells[2],
	    cells[3]);
}

/* A metric with its "from large pool" and "from small pool" lines, in the
 * units of its total. */
static void metric(struct table *t, const char *name, const devcache_stat_t pools[],
		   format_fn *format)
{
	rule(t, '-');
	row(t, name, &pools[DEVCACHE_POOL_ALL], &pools[DEVCACHE_POOL_ALL], format);
	row(t, "      from large pool", &pools[DEVCACHE_POOL_LARGE], &pools[DEVCACHE_POOL_ALL],
	    format);
	row(t, "      from small pool", &pools[DEVCACHE_POOL_SMALL], &pools[DEVCACHE_POOL_ALL],
	    format);
}

/* Two facts side by side: "label: value" right-aligned in the left half,
 * as PyTorch places its OOM count, and left-aligned in the right half. */
static void facts(struct table *t, const char *left, const char *left_value, const char *right,
		  const char *right_value)
{
	char l[WIDTH + 1], r[WIDTH + 1];

	snprintf(l, sizeof l, "%s: %-12s", left, left_value);
	if (right)
		snprintf(r, sizeof r, "       %s: %s", right, right_value);
	else
		r[0] = '\0';
	add(t, "|%*.35s | %-37.37s|\n", 35, l, r);
}

static void trim(char *s)
{
	size_t start = strspn(s, " "), end = strlen(s);

	while (end > start && s[end - 1] == ' ')
		end--;
	memmove(s, s + start, end - start);
	s[end - start] = '\0';
}

static void header(struct table *t, const char *device, const devcache_stats_t *st)
{
	char title[WIDTH + 1], a[CELL_BUF], b[CELL_BUF];
	int n, pad;

	rule(t, '=');
	n = snprintf(title, sizeof title, "libdevcache memory summary, device ID %s", device);
	n = n < 0 ? 0 : n > WIDTH ? WIDTH : n;
	pad = (WIDTH - n) / 2;
	add(t, "|%*s%s%*s|\n", pad, "", title, WIDTH - n - pad, "");
	rule(t, '-');
	snprintf(a, sizeof a, "%" PRIu64, st->num_ooms);
	snprintf(b, sizeof b, "%" PRIu64, st->num_alloc_retries);
	facts(t, "CUDA OOMs", a, "cudaMalloc retries", b);
	cell_size(a, (int64_t)(st->largest_free_block > INT64_MAX ? INT64_MAX
								     : st->largest_free_block),
		    (int64_t)(st->largest_free_block > INT64_MAX ? INT64_MAX
								 : st->largest_free_block));
	trim(a);
	/* Per mille in integers: the caller's LC_NUMERIC does not matter. */
	double f = st->fragmentation;
	unsigned permille = f > 0 && f <= 1 ? (unsigned)(f * 1000 + 0.5) : f > 1 ? 1000 : 0;
	snprintf(b, sizeof b, "%u.%u%%", permille / 10, permille % 10);
	facts(t, "Largest free block", a, "Fragmentation", b);
	/* libdevcache's own, where it did better than PyTorch. */
	if (st->num_stitches) {
		snprintf(a, sizeof a, "%" PRIu64, st->num_stitches);
		facts(t, "Stitched allocations", a, NULL, NULL);
	}
	rule(t, '=');
	add(t, "|%-*s|\n", WIDTH, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ");
}

static void table(struct table *t, const char *device, const devcache_stats_t *st)
{
	header(t, device, st);
	metric(t, "Allocated memory", st->allocated_bytes, cell_size);
	metric(t, "Active memory", st->active_bytes, cell_size);
	metric(t, "Requested memory", st->requested_bytes, cell_size);
	/* PyTorch's labels, word for word, whatever the device, so that what
	 * reads torch.cuda.memory_summary() reads this (PyTorch's ROCm build
	 * prints the same). */
	metric(t, "GPU reserved memory", st->reserved_bytes, cell_size);
	metric(t, "Non-releasable memory", st->inactive_split_bytes, cell_size);
	metric(t, "Allocations", st->allocation, cell_count);
	metric(t, "Active allocs", st->active, cell_count);
	metric(t, "GPU reserved segments", st->segment, cell_count);
	metric(t, "Non-releasable allocs", st->inactive_split, cell_count);
	rule(t, '-');
	row(t, "Oversize allocations", &st->oversize_allocations, &st->oversize_allocations,
	    cell_count);
	rule(t, '-');
	row(t, "Oversize GPU segments", &st->oversize_segments, &st->oversize_segments, cell_count);
	rule(t, '=');
}

int devcache_summary(devcache_device_t *dev, FILE *out)
{
	devcache_stats_t st;
	struct table *t;
	int rc;

	if (!dev || !out)
		return err_set(DEVCACHE_EINVAL, _("devcache_summary: NULL argument"));
	if ((rc = devcache_stats(dev, &st)))
		return rc;
	if (!(t = malloc(sizeof *t)))
		return err_set(DEVCACHE_ENOMEM, _("devcache_summary: out of memory"));
	t->len = 0;
	t->text[0] = '\0';
	table(t, dev->id, &st);
	errno = 0;
	if (fwrite(t->text, 1, t->len, out) != t->len || fflush(out) != 0) {
		int e = errno;

		free(t);
		return err_set(DEVCACHE_EIO, _("devcache_summary: write error: %s"),
			       strerror(e ? e : EIO));
	}
	free(t);
	return 0;
}
