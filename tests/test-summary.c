/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-summary.c - devcache_summary()'s table: PyTorch's layout and units, checked against statistics made up to reach every threshold. */
#include "config.h"

#include "tap.h"

#include <stdio.h>

#include "internal.h"

/* summary.c is built into this program alone, over these. */
static devcache_stats_t fake;
static int fake_rc;

int devcache_stats(devcache_device_t *dev, devcache_stats_t *stats)
{
	(void)dev;
	*stats = fake;
	return fake_rc;
}

int err_set(int code, const char *fmt, ...)
{
	(void)fmt;
	return code;
}

const char *i18n_gettext(const char *msgid)
{
	return msgid;
}

static char *render(devcache_device_t *dev)
{
	char *text = NULL;
	size_t size;
	FILE *f = open_memstream(&text, &size);

	assert_non_null(f);
	assert_int_equal(devcache_summary(dev, f), 0);
	assert_int_equal(fclose(f), 0);
	return text;
}

/* Every line is the 75 columns of the box between its two bars. */
static void check_box(const char *text)
{
	size_t lines = 0;

	for (const char *l = text; *l; lines++) {
		const char *nl = strchr(l, '\n');

		assert_non_null(nl);
		if (nl - l != 77 || l[0] != '|' || nl[-1] != '|')
			fail_msg("line %zu is not a 77-column box line: '%.*s'", lines + 1,
				 (int)(nl - l), l);
		l = nl + 1;
	}
	assert_int_equal(lines, 48 + (fake.num_stitches != 0));
}

#define K 1024LL
#define M (K * K)
#define G (M * K)
#define T (G * K)

static void set(devcache_stat_t s[3], devcache_stat_t all, devcache_stat_t large,
		devcache_stat_t small)
{
	s[DEVCACHE_POOL_ALL] = all;
	s[DEVCACHE_POOL_LARGE] = large;
	s[DEVCACHE_POOL_SMALL] = small;
}

#define ST(a, b, c, d) ((devcache_stat_t){a, b, c, d})

/* The expected table was computed with PyTorch's own rules (Python's
 * formatting of each value in the unit its column's total calls for). */
static void pytorch_units(void **state)
{
	struct devcache_device dev = {.id = "cuda:3"};
	static const char expected[] =
		"|===========================================================================|\n"
		"|               libdevcache memory summary, device ID cuda:3                |\n"
		"|---------------------------------------------------------------------------|\n"
		"|            CUDA OOMs: 3            |        cudaMalloc retries: 17        |\n"
		"|   Largest free block: 20480 KiB    |        Fragmentation: 37.5%          |\n"
		"|===========================================================================|\n"
		"|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n"
		"|---------------------------------------------------------------------------|\n"
		"| Allocated memory      | 786431 B   |    768 KiB |   3072 MiB |   5120 GiB |\n"
		"|       from large pool | 786000 B   |    767 KiB |   3072 MiB |   5119 GiB |\n"
		"|       from small pool |    431 B   |      0 KiB |      0 MiB |      0 GiB |\n"
		"|---------------------------------------------------------------------------|\n"
		"| Active memory         |      0 B   |   1000 B   | 786431 B   |    768 KiB |\n"
		"|       from large pool |      0 B   |      0 B   |      0 B   |      0 KiB |\n"
		"|       from small pool |      0 B   |   1000 B   | 786431 B   |    768 KiB |\n"
		"|---------------------------------------------------------------------------|\n"
		"| Requested memory      |  12345 B   |    976 KiB |      1 B   |      2 B   |\n"
		"|       from large pool |  12000 B   |    975 KiB |      1 B   |      2 B   |\n"
		"|       from small pool |    345 B   |      0 KiB |      0 B   |      0 B   |\n"
		"|---------------------------------------------------------------------------|\n"
		"| GPU reserved memory   |  20480 KiB |    768 GiB |    800 GiB |    800 TiB |\n"
		"|       from large pool |  18432 KiB |    767 GiB |    799 GiB |    799 TiB |\n"
		"|       from small pool |   2048 KiB |      1 GiB |      1 GiB |      1 TiB |\n"
		"|---------------------------------------------------------------------------|\n"
		"| Non-releasable memory |      5 B   |      6 B   |      7 B   |      8 B   |\n"
		"|       from large pool |      1 B   |      2 B   |      3 B   |      4 B   |\n"
		"|       from small pool |      4 B   |      4 B   |      4 B   |      4 B   |\n"
		"|---------------------------------------------------------------------------|\n"
		"| Allocations           |  749999    |     750 K  |    1000 M  |     999 M  |\n"
		"|       from large pool |       1    |     749 K  |     999 M  |       0 M  |\n"
		"|       from small pool |  749998    |       0 K  |       0 M  |     999 M  |\n"
		"|---------------------------------------------------------------------------|\n"
		"| Active allocs         |       0    |       0    |       0    |       0    |\n"
		"|       from large pool |       0    |       0    |       0    |       0    |\n"
		"|       from small pool |       0    |       0    |       0    |       0    |\n"
		"|---------------------------------------------------------------------------|\n"
		"| GPU reserved segments |       3    |       4    |       5    |       6    |\n"
		"|       from large pool |       1    |       2    |       3    |       4    |\n"
		"|       from small pool |       2    |       2    |       2    |       2    |\n"
		"|---------------------------------------------------------------------------|\n"
		"| Non-releasable allocs |       7    |       8    |       9    |      10    |\n"
		"|       from large pool |       7    |       8    |       9    |      10    |\n"
		"|       from small pool |       0    |       0    |       0    |       0    |\n"
		"|---------------------------------------------------------------------------|\n"
		"| Oversize allocations  |       1    |       2    |     750 K  |  749999    |\n"
		"|---------------------------------------------------------------------------|\n"
		"| Oversize GPU segments |       0    |       0    |       0    |       0    |\n"
		"|===========================================================================|\n";

	(void)state;
	memset(&fake, 0, sizeof fake);
	set(fake.allocated_bytes, ST(786431, 786432, 3 * G + 5, 5 * T),
	    ST(786000, 786432 - 512, 3 * G, 5 * T - M), ST(431, 512, 5, M));
	set(fake.active_bytes, ST(0, 1000, 768 * K - 1, 768 * K), ST(0, 0, 0, 0),
	    ST(0, 1000, 768 * K - 1, 768 * K));
	set(fake.requested_bytes, ST(12345, 999999, 1, 2), ST(12000, 999000, 1, 2),
	    ST(345, 999, 0, 0));
	set(fake.reserved_bytes, ST(20 * M, 768 * G, 800 * G, 800 * T),
	    ST(18 * M, 767 * G, 799 * G, 799 * T), ST(2 * M, G, G, T));
	set(fake.inactive_split_bytes, ST(5, 6, 7, 8), ST(1, 2, 3, 4), ST(4, 4, 4, 4));
	set(fake.allocation, ST(749999, 750000, 1000000000, 999999999),
	    ST(1, 749999, 999999999, 1), ST(749998, 1, 1, 999999998));
	set(fake.segment, ST(3, 4, 5, 6), ST(1, 2, 3, 4), ST(2, 2, 2, 2));
	set(fake.inactive_split, ST(7, 8, 9, 10), ST(7, 8, 9, 10), ST(0, 0, 0, 0));
	fake.oversize_allocations = ST(1, 2, 750000, 749999);
	fake.num_ooms = 3;
	fake.num_alloc_retries = 17;
	fake.largest_free_block = 20 * M;
	fake.fragmentation = 0.375;

	char *text = render(&dev);
	check_box(text);
	assert_string_equal(text, expected);
	free(text);
}

/* Values no device has, and statistics that contradict each other, still
 * keep to the box. */
static void extremes_keep_the_box(void **state)
{
	struct devcache_device dev = {.id = "a-very-long-device-name:31"};
	devcache_stat_t big = ST(INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX);
	devcache_stat_t neg = ST(-5, -999999999, INT64_MIN, -1);
	char *text;

	(void)state;
	memset(&fake, 0, sizeof fake);
	for (int p = 0; p < DEVCACHE_POOL_COUNT; p++) {
		fake.allocated_bytes[p] = big;
		fake.allocation[p] = big;
		fake.reserved_bytes[p] = neg;
		fake.segment[p] = neg;
	}
	/* a pool larger than the total */
	fake.active_bytes[DEVCACHE_POOL_LARGE] = big;
	fake.active[DEVCACHE_POOL_SMALL] = big;
	fake.oversize_segments = neg;
	fake.num_ooms = UINT64_MAX;
	fake.num_alloc_retries = UINT64_MAX;
	fake.largest_free_block = UINT64_MAX;
	fake.fragmentation = 7.5; /* nonsense, shown as 100% */
	text = render(&dev);
	check_box(text);
	assert_contains(text, "| Allocated memory      |   8191 PiB |   8191 PiB |");
	assert_contains(text, "| Allocations           |    9223 P  |    9223 P  |");
	assert_contains(text, "|       from large pool |   8191 PiB |");
	assert_contains(text, "|     -5 B   |");
	assert_contains(text, "CUDA OOMs: 18446744073709551615");
	assert_contains(text, "Fragmentation: 100.0%");
	assert_not_contains(text, "Stitched");
	free(text);
	/* Only where stitching served something, a line of libdevcache's own. */
	fake.num_stitches = UINT64_MAX;
	text = render(&dev);
	check_box(text);
	assert_contains(text, "|Stitched allocations: 1844674407370 |");
	free(text);
	fake.num_stitches = 12;
	text = render(&dev);
	check_box(text);
	assert_contains(text, "| Stitched allocations: 12           |                                      |");
	assert_contains(text, "libdevcache memory summary, device ID a-very-long-device-name:31");
	free(text);

	fake.fragmentation = 0.0004;
	text = render(&dev);
	assert_contains(text, "Fragmentation: 0.0%");
	free(text);
	fake.fragmentation = 0.9996;
	text = render(&dev);
	assert_contains(text, "Fragmentation: 100.0%");
	free(text);
}

static void errors(void **state)
{
	struct devcache_device dev = {.id = "host"};
	FILE *full = fopen("/dev/full", "w");

	(void)state;
	assert_int_equal(devcache_summary(NULL, stdout), DEVCACHE_EINVAL);
	assert_int_equal(devcache_summary(&dev, NULL), DEVCACHE_EINVAL);
	fake_rc = DEVCACHE_ENODEV;
	assert_int_equal(devcache_summary(&dev, stdout), DEVCACHE_ENODEV);
	fake_rc = 0;
	if (full) {
		assert_int_equal(devcache_summary(&dev, full), DEVCACHE_EIO);
		fclose(full);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pytorch_units),
		cmocka_unit_test(extremes_keep_the_box),
		cmocka_unit_test(errors),
	};

	return RUN_TAP(tests);
}
