/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-tunables.c - every tunable type through tunable_parse: values, ranges, errors, defaults, formatting. */
#include "tap.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "internal.h"

#define MiB (1ULL << 20)
#define GiB (1ULL << 30)

/* ---- helpers: parse and fail with the caller's line -------------------- */

static char why[1024];

/* A plain list, as a backend module may declare ("cuda_library"). */
#define TUN_TEST_LIST TUN_COUNT
static const struct tunable_def test_list = {"test_list", TT_LIST, "x", "", 0, G_BACKENDS,
					     "A list", "A list of names."};
#define DEF(id) ((id) == TUN_TEST_LIST ? &test_list : &tunable_defs[id])

static void parse_ok_at(enum tunable_id id, const char *text, struct tunable_value *v, int line)
{
	int rc;

	strcpy(why, "(untouched)");
	rc = tunable_parse_def(DEF(id), text, v, why, sizeof why);
	if (rc)
		fail_msg("line %d: %s '%s' rejected (%d): %s", line, DEF(id)->name, text, rc, why);
}
#define parse_ok(id, text, v) parse_ok_at(id, text, v, __LINE__)

/* Parse text, expect DEVCACHE_ECONFIG and nothing left allocated; the message. */
static const char *parse_bad_at(enum tunable_id id, const char *text, int line)
{
	struct tunable_value v;
	int rc;

	strcpy(why, "");
	rc = tunable_parse_def(DEF(id), text, &v, why, sizeof why);
	if (rc != DEVCACHE_ECONFIG) {
		tunable_value_free(&v);
		fail_msg("line %d: %s '%s': expected DEVCACHE_ECONFIG, got %d", line, DEF(id)->name,
			 text, rc);
	}
	if (v.str || v.items || v.n_items || v.origin)
		fail_msg("line %d: %s '%s': failed parse left a value behind", line, DEF(id)->name,
			 text);
	if (!*why)
		fail_msg("line %d: %s '%s': no reason given", line, DEF(id)->name, text);
	return why;
}
#define parse_bad(id, text) parse_bad_at(id, text, __LINE__)

static bool bool_value_at(const char *text, int line)
{
	struct tunable_value v;

	parse_ok_at(TUN_caching, text, &v, line);
	return v.u.b;
}
#define parse_bool_value(text) bool_value_at(text, __LINE__)

static long long int_value_at(enum tunable_id id, const char *text, int line)
{
	struct tunable_value v;

	parse_ok_at(id, text, &v, line);
	return v.u.i;
}
#define parse_int_value(id, text) int_value_at(id, text, __LINE__)

static double float_value_at(enum tunable_id id, const char *text, int line)
{
	struct tunable_value v;

	parse_ok_at(id, text, &v, line);
	assert_int_equal(v.special, TV_VALUE);
	return v.u.f;
}
#define parse_float_value(id, text) float_value_at(id, text, __LINE__)

static uint64_t size_value_at(enum tunable_id id, const char *text, int line)
{
	struct tunable_value v;

	parse_ok_at(id, text, &v, line);
	assert_int_equal(v.special, TV_VALUE);
	return v.u.size;
}
#define parse_size_value(id, text) size_value_at(id, text, __LINE__)

static void assert_divisions(const struct tunable_value *v, const unsigned expect[DIVISION_INTERVALS])
{
	for (int i = 0; i < DIVISION_INTERVALS; i++)
		if (v->divisions[i] != expect[i])
			fail_msg("'%s': interval %d has %u divisions, expected %u", v->str, i,
				 v->divisions[i], expect[i]);
}

static void assert_items(const struct tunable_value *v, const char *const *expect, size_t n)
{
	assert_int_equal(v->n_items, n);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(v->items[i], expect[i]);
}

/* ---- bool ------------------------------------------------------------------ */

static void bool_spellings(void **state)
{
	static const char *const yes[] = {"true", "yes", "on", "1", "True", "TRUE", "Yes", "ON", " true "};
	static const char *const no[] = {"false", "no", "off", "0", "False", "FALSE", "No", "Off", "\t0\n"};

	(void)state;
	for (size_t i = 0; i < sizeof yes / sizeof *yes; i++)
		assert_true(parse_bool_value(yes[i]));
	for (size_t i = 0; i < sizeof no / sizeof *no; i++)
		assert_false(parse_bool_value(no[i]));
}

static void bool_errors(void **state)
{
	(void)state;
	assert_string_equal(parse_bad(TUN_caching, "maybe"),
			    "invalid bool 'maybe' (expected true or false (also yes/no, on/off, 1/0))");
	assert_contains(parse_bad(TUN_caching, "2"), "'2'");
	assert_contains(parse_bad(TUN_caching, "tru"), "'tru'");
	assert_contains(parse_bad(TUN_caching, "yess"), "expected true or false");
	assert_string_equal(parse_bad(TUN_caching, "  "),
			    "missing value (expected true or false (also yes/no, on/off, 1/0))");
}

/* ---- int ------------------------------------------------------------------- */

static void int_values_and_range(void **state)
{
	(void)state;
	assert_int_equal(parse_int_value(TUN_load_workers, "1"), 1);
	assert_int_equal(parse_int_value(TUN_load_workers, "64"), 64);
	assert_int_equal(parse_int_value(TUN_load_workers, " 8 "), 8);
	assert_int_equal(parse_int_value(TUN_staging_buffers, "2"), 2);
	assert_string_equal(parse_bad(TUN_load_workers, "0"),
			    "'0' is out of range (accepted: at least 1 and at most 64)");
	assert_string_equal(parse_bad(TUN_load_workers, "65"),
			    "'65' is out of range (accepted: at least 1 and at most 64)");
	assert_contains(parse_bad(TUN_load_workers, "-1"), "'-1' is out of range");
	assert_string_equal(parse_bad(TUN_staging_buffers, "1"),
			    "'1' is out of range (accepted: at least 2 and at most 64)");
}

static void int_errors(void **state)
{
	(void)state;
	assert_string_equal(parse_bad(TUN_load_workers, "2x"), "invalid int '2x' (expected an integer)");
	assert_string_equal(parse_bad(TUN_load_workers, "1.5"), "invalid int '1.5' (expected an integer)");
	assert_string_equal(parse_bad(TUN_load_workers, "0x10"), "invalid int '0x10' (expected an integer)");
	assert_string_equal(parse_bad(TUN_load_workers, "99999999999999999999"),
			    "invalid int '99999999999999999999' (expected an integer)");
	assert_string_equal(parse_bad(TUN_load_workers, "auto"), "invalid int 'auto' (expected an integer)");
	assert_string_equal(parse_bad(TUN_load_workers, ""), "missing value (expected an integer)");
}

/* ---- float: half-open ranges ------------------------------------------------ */

static void float_half_open_ranges(void **state)
{
	(void)state;
	/* garbage_collection_threshold [0,1) */
	assert_true(parse_float_value(TUN_garbage_collection_threshold, "0") == 0.0);
	assert_true(parse_float_value(TUN_garbage_collection_threshold, "0.6") == 0.6);
	assert_true(parse_float_value(TUN_garbage_collection_threshold, "0.999") == 0.999);
	assert_string_equal(parse_bad(TUN_garbage_collection_threshold, "1"),
			    "'1' is out of range (accepted: at least 0 and less than 1)");
	assert_contains(parse_bad(TUN_garbage_collection_threshold, "1.5"), "'1.5' is out of range");
	assert_contains(parse_bad(TUN_garbage_collection_threshold, "-0.1"), "'-0.1' is out of range");
	/* memory_fraction (0,1] */
	assert_true(parse_float_value(TUN_memory_fraction, "1") == 1.0);
	assert_true(parse_float_value(TUN_memory_fraction, "1e-3") == 0.001);
	assert_true(parse_float_value(TUN_memory_fraction, " .25 ") == 0.25);
	assert_string_equal(parse_bad(TUN_memory_fraction, "0"),
			    "'0' is out of range (accepted: greater than 0 and at most 1)");
	assert_contains(parse_bad(TUN_memory_fraction, "1.0001"), "'1.0001' is out of range");
}

static void float_errors(void **state)
{
	(void)state;
	assert_string_equal(parse_bad(TUN_memory_fraction, "half"),
			    "invalid float 'half' (expected a number such as 0.5)");
	assert_string_equal(parse_bad(TUN_memory_fraction, "0.5x"),
			    "invalid float '0.5x' (expected a number such as 0.5)");
	assert_contains(parse_bad(TUN_memory_fraction, "nan"), "invalid float 'nan'");
	assert_contains(parse_bad(TUN_memory_fraction, "inf"), "invalid float 'inf'");
	assert_contains(parse_bad(TUN_memory_fraction, "1e999"), "invalid float '1e999'");
	assert_string_equal(parse_bad(TUN_memory_fraction, ""),
			    "missing value (expected a number such as 0.5)");
}

/* ---- size ------------------------------------------------------------------- */

static void size_units(void **state)
{
	(void)state;
	/* max_cache_ram: bytes by default, [0,], auto */
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "0"), 0);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "4096"), 4096);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "12B"), 12);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "1K"), 1024);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "1k"), 1024);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "64KB"), 65536);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "64KiB"), 65536);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "3M"), 3 * MiB);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "3mib"), 3 * MiB);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "3MiB"), 3 * MiB);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "3MB"), 3 * MiB);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "2G"), 2 * GiB);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "5T"), 5ULL << 40);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, " 2 G "), 2 * GiB);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "16777215T"), 16777215ULL << 40);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "18446744073709551615"), UINT64_MAX);
}

static void size_decimals(void **state)
{
	(void)state;
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "1.5G"), 3 * GiB / 2);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "0.5K"), 512);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "1.25M"), 5 * MiB / 4);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "2.0G"), 2 * GiB);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "0.125T"), 1ULL << 37);
}

/* 1.75G is 1879048192 bytes exactly; summing 7 * 0.1 + 5 * 0.01 in binary
 * floating point gives 0.7500000000000001, which the parser then rejects as a
 * fraction of a byte. */
static void size_decimal_rounding(void **state)
{
	(void)state;
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "1.75G"), 7 * GiB / 4);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "0.75M"), 3 * MiB / 4);
	assert_int_equal(parse_size_value(TUN_max_split_size_mb, "1.75G"), 7 * GiB / 4);
	/* 18 digits of fraction times 2^40 pass 64 bits before they are
	 * reduced: the parser works in 64 bits (32-bit targets have no
	 * __int128) and still gets them exactly. */
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "0.500000000000000000T"), 1ULL << 39);
	assert_int_equal(parse_size_value(TUN_max_cache_ram, "16777215.5T"),
			 (16777215ULL << 40) + (1ULL << 39));
}

static void size_mib_default(void **state)
{
	(void)state;
	assert_int_equal(parse_size_value(TUN_max_split_size_mb, "512"), 512 * MiB);
	assert_int_equal(parse_size_value(TUN_max_split_size_mb, "2G"), 2 * GiB);
	assert_int_equal(parse_size_value(TUN_max_split_size_mb, "21"), 21 * MiB);
	assert_int_equal(parse_size_value(TUN_max_split_size_mb, "21M"), 21 * MiB);
	assert_int_equal(parse_size_value(TUN_max_split_size_mb, "20481K"), 20 * MiB + 1024);
	assert_int_equal(parse_size_value(TUN_max_split_size_mb, "20971521B"), 20 * MiB + 1);
	assert_int_equal(parse_size_value(TUN_max_non_split_rounding_mb, "20"), 20 * MiB);
	assert_int_equal(parse_size_value(TUN_max_split_size_mb, "20.5"), 41 * MiB / 2);
	assert_int_equal(parse_size_value(TUN_large_segment_size_mb, "2.5"), 5 * MiB / 2);
	assert_int_equal(parse_size_value(TUN_max_non_split_rounding_mb, "64"), 64 * MiB);
	assert_int_equal(parse_size_value(TUN_large_segment_size_mb, "4096"), 4 * GiB);
	assert_int_equal(parse_size_value(TUN_large_segment_size_mb, "2"), 2 * MiB);
	/* without T_MIB a bare number is bytes */
	assert_int_equal(parse_size_value(TUN_staging_buffer_size, "65536"), 65536);
}

static void size_ranges(void **state)
{
	(void)state;
	/* PyTorch's bound: more than 20 MiB. */
	assert_string_equal(parse_bad(TUN_max_split_size_mb, "20"),
			    "'20' is out of range (accepted: greater than 20M, or unlimited)");
	assert_contains(parse_bad(TUN_max_split_size_mb, "20971520B"), "'20971520B' is out of range");
	assert_contains(parse_bad(TUN_max_split_size_mb, "0"), "greater than 20M");
	assert_string_equal(parse_bad(TUN_large_segment_size_mb, "4097"),
			    "'4097' is out of range (accepted: at least 2M and at most 4G)");
	assert_contains(parse_bad(TUN_large_segment_size_mb, "1"), "'1' is out of range");
	assert_string_equal(parse_bad(TUN_staging_buffer_size, "32K"),
			    "'32K' is out of range (accepted: at least 64K and at most 1G)");
	assert_string_equal(parse_bad(TUN_malloc_mmap_threshold, "33M"),
			    "'33M' is out of range (accepted: at least 0 and at most 32M)");
	assert_int_equal(parse_size_value(TUN_malloc_mmap_threshold, "32M"), 32 * MiB);
	assert_int_equal(parse_size_value(TUN_staging_buffer_size, "1G"), GiB);
}

static void size_auto_and_unlimited(void **state)
{
	struct tunable_value v;

	(void)state;
	parse_ok(TUN_max_split_size_mb, "unlimited", &v);
	assert_int_equal(v.special, TV_UNLIMITED);
	assert_int_equal(v.u.size, UINT64_MAX);
	parse_ok(TUN_max_split_size_mb, "Unlimited", &v);
	assert_int_equal(v.special, TV_UNLIMITED);
	parse_ok(TUN_max_cache_ram, "auto", &v);
	assert_int_equal(v.special, TV_AUTO);
	parse_ok(TUN_device_working_mem, " AUTO ", &v);
	assert_int_equal(v.special, TV_AUTO);
	assert_string_equal(parse_bad(TUN_max_split_size_mb, "auto"),
			    "invalid size 'auto' (expected a size in MiB such as 512, or with a unit "
			    "such as 2G, or unlimited)");
	assert_string_equal(parse_bad(TUN_max_cache_ram, "unlimited"),
			    "invalid size 'unlimited' (expected a size such as 4096, 64K, 512M or 2G, "
			    "or auto)");
	assert_string_equal(parse_bad(TUN_staging_buffer_size, "auto"),
			    "invalid size 'auto' (expected a size such as 4096, 64K, 512M or 2G)");
	assert_string_equal(parse_bad(TUN_max_non_split_rounding_mb, "unlimited"),
			    "invalid size 'unlimited' (expected a size in MiB such as 512, or with a "
			    "unit such as 2G)");
}

static void size_errors(void **state)
{
	static const char *const bad[] = {
		"99999999999T",         /* overflows 64 bits */
		"18446744073709551616", /* one more than UINT64_MAX */
		"16777216T",            /* 2^64 */
		"0.3K",                 /* 307.2 bytes */
		"1.5",                  /* 1.5 bytes */
		"1.5B",
		"16777215.999999999999999999T", /* 18 digits, not a whole byte */
		"0.000000000000000001T",        /* a millionth of a byte */
		"12X", "1KBB", "1BB", "1BiB", "1Ki", "1KiBs", "1 K B",
		"1.K", ".5G", "-1K", "K", "1e3", "1,5G",
	};

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char expect[128];

		snprintf(expect, sizeof expect,
			 "invalid size '%s' (expected a size such as 4096, 64K, 512M or 2G, or auto)",
			 bad[i]);
		assert_string_equal(parse_bad(TUN_max_cache_ram, bad[i]), expect);
	}
	assert_string_equal(parse_bad(TUN_max_split_size_mb, "abc"),
			    "invalid size 'abc' (expected a size in MiB such as 512, or with a unit "
			    "such as 2G, or unlimited)");
	assert_contains(parse_bad(TUN_max_split_size_mb, "99999999999T"), "'99999999999T'");
	assert_string_equal(parse_bad(TUN_max_cache_ram, ""),
			    "missing value (expected a size such as 4096, 64K, 512M or 2G, or auto)");
}

/* ---- enum ------------------------------------------------------------------- */

static void enum_values(void **state)
{
	static const struct {
		const char *text;
		int level;
	} ok[] = {
		{"none", DEVCACHE_LOG_NONE},       {"error", DEVCACHE_LOG_ERROR},
		{"warning", DEVCACHE_LOG_WARNING}, {"info", DEVCACHE_LOG_INFO},
		{"debug", DEVCACHE_LOG_DEBUG},     {"DEBUG", DEVCACHE_LOG_DEBUG},
		{"Warning", DEVCACHE_LOG_WARNING}, {" info ", DEVCACHE_LOG_INFO},
	};
	struct tunable_value v;

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
		parse_ok(TUN_log_level, ok[i].text, &v);
		assert_int_equal(v.u.e, ok[i].level);
	}
}

static void enum_errors(void **state)
{
	(void)state;
	assert_string_equal(parse_bad(TUN_log_level, "verbose"),
			    "invalid enum 'verbose' (expected one of: none, error, warning, info, debug)");
	assert_contains(parse_bad(TUN_log_level, "warn"), "'warn'");
	assert_contains(parse_bad(TUN_log_level, "debugx"), "'debugx'");
	assert_contains(parse_bad(TUN_log_level, "2"), "one of: none, error, warning, info, debug");
	assert_string_equal(parse_bad(TUN_log_level, ""),
			    "missing value (expected one of: none, error, warning, info, debug)");
}

/* ---- string ----------------------------------------------------------------- */

static void string_values(void **state)
{
	struct tunable_value v;

	(void)state;
	parse_ok(TUN_trace, "/tmp/trace-%p.log", &v);
	assert_string_equal(v.str, "/tmp/trace-%p.log");
	tunable_value_free(&v);
	parse_ok(TUN_trace, "  /tmp/a b  ", &v);
	assert_string_equal(v.str, "/tmp/a b");
	tunable_value_free(&v);
	parse_ok(TUN_trace, "", &v);
	assert_non_null(v.str);
	assert_string_equal(v.str, "");
	tunable_value_free(&v);
	parse_ok(TUN_backend_path, "/a:/b,c", &v);
	assert_string_equal(v.str, "/a:/b,c");
	assert_int_equal(v.n_items, 0);
	tunable_value_free(&v);
}

/* ---- lists ------------------------------------------------------------------ */

static void list_forms(void **state)
{
	static const char *const abc[] = {"a.so", "b.so", "c.so"};
	struct tunable_value v;

	(void)state;
	parse_ok(TUN_TEST_LIST, "a.so,b.so,c.so", &v);
	assert_items(&v, abc, 3);
	assert_string_equal(v.str, "a.so,b.so,c.so");
	tunable_value_free(&v);
	parse_ok(TUN_TEST_LIST, " a.so , b.so,\tc.so ", &v);
	assert_items(&v, abc, 3);
	assert_string_equal(v.str, "a.so,b.so,c.so");
	tunable_value_free(&v);
	parse_ok(TUN_TEST_LIST, "[a.so, b.so, c.so]", &v);
	assert_items(&v, abc, 3);
	assert_string_equal(v.str, "[a.so,b.so,c.so]");
	tunable_value_free(&v);
	parse_ok(TUN_TEST_LIST, "[ a.so ]", &v);
	assert_items(&v, abc, 1);
	assert_string_equal(v.str, "[a.so]");
	tunable_value_free(&v);
	parse_ok(TUN_TEST_LIST, "/opt/lib/libcuda.so.1", &v);
	assert_int_equal(v.n_items, 1);
	assert_string_equal(v.items[0], "/opt/lib/libcuda.so.1");
	tunable_value_free(&v);
}

static void list_errors(void **state)
{
	(void)state;
	assert_string_equal(parse_bad(TUN_TEST_LIST, "a.so,,b.so"), "empty item in list 'a.so,,b.so'");
	assert_string_equal(parse_bad(TUN_TEST_LIST, "a.so,"), "empty item in list 'a.so,'");
	assert_string_equal(parse_bad(TUN_TEST_LIST, ",a.so"), "empty item in list ',a.so'");
	assert_string_equal(parse_bad(TUN_TEST_LIST, "[a.so, ,b.so]"),
			    "empty item in list '[a.so, ,b.so]'");
	assert_string_equal(parse_bad(TUN_TEST_LIST, "[a.so,b.so"), "'[a.so,b.so' has no closing ']'");
	assert_string_equal(parse_bad(TUN_TEST_LIST, "["), "'[' has no closing ']'");
	assert_string_equal(parse_bad(TUN_TEST_LIST, "[]"), "empty item in list '[]'");
	assert_string_equal(parse_bad(TUN_TEST_LIST, ""), "missing value (expected a value)");
}

/* ---- roundup_power2_divisions ----------------------------------------------- */

static void divisions_single_value(void **state)
{
	unsigned expect[DIVISION_INTERVALS];
	struct tunable_value v;

	(void)state;
	for (int i = 0; i < DIVISION_INTERVALS; i++)
		expect[i] = 4;
	parse_ok(TUN_roundup_power2_divisions, "4", &v);
	assert_divisions(&v, expect);
	assert_string_equal(v.str, "4");
	tunable_value_free(&v);
	memset(expect, 0, sizeof expect);
	parse_ok(TUN_roundup_power2_divisions, "0", &v);
	assert_divisions(&v, expect);
	tunable_value_free(&v);
	for (int i = 0; i < DIVISION_INTERVALS; i++)
		expect[i] = 1u << 20;
	parse_ok(TUN_roundup_power2_divisions, "1048576", &v);
	assert_divisions(&v, expect);
	tunable_value_free(&v);
}

/* PyTorch's own example: '>' fills from the last interval named (512 MiB,
 * index 9) inclusive, so 512:2 is overwritten by 8, exactly as
 * CUDAAllocatorConfig::parseRoundUpPower2Divisions does. */
static void divisions_pytorch_table(void **state)
{
	static const unsigned expect[DIVISION_INTERVALS] = {1, 1, 1, 1, 1, 1, 1, 1, 1,
							    8, 8, 8, 8, 8, 8, 8};
	struct tunable_value v;

	(void)state;
	parse_ok(TUN_roundup_power2_divisions, "[256:1,512:2,>:8]", &v);
	assert_divisions(&v, expect);
	assert_string_equal(v.str, "[256:1,512:2,>:8]");
	tunable_value_free(&v);
	/* spaces and no brackets give the same table */
	parse_ok(TUN_roundup_power2_divisions, " 256 : 1 , 512:2 , > : 8 ", &v);
	assert_divisions(&v, expect);
	assert_string_equal(v.str, "256 : 1,512:2,> : 8");
	tunable_value_free(&v);
}

static void divisions_gaps_and_clamping(void **state)
{
	static const unsigned gaps[DIVISION_INTERVALS] = {8, 8, 8, 8, 8, 8, 8, 0, 4};
	static const unsigned last[DIVISION_INTERVALS] = {2, 2, 2, 2, 2, 2, 2, 2,
							  2, 2, 2, 0, 0, 0, 0, 16};
	static const unsigned first_only[DIVISION_INTERVALS] = {4, 16, 16, 16, 16, 16, 16, 16,
								16, 16, 16, 16, 16, 16, 16, 16};
	struct tunable_value v;

	(void)state;
	parse_ok(TUN_roundup_power2_divisions, "[64:8,256:4]", &v);
	assert_divisions(&v, gaps);
	tunable_value_free(&v);
	/* 2^16 MiB is past the last interval: clamped to index 15 */
	parse_ok(TUN_roundup_power2_divisions, "[1024:2,65536:16]", &v);
	assert_divisions(&v, last);
	tunable_value_free(&v);
	parse_ok(TUN_roundup_power2_divisions, "[1:4,2:8,>:16]", &v);
	assert_divisions(&v, first_only);
	tunable_value_free(&v);
}

static void divisions_errors(void **state)
{
	static const char *const bad[] = {
		"3",           /* not a power of two */
		"2097152",     /* more than 2^20 */
		"-4", "four", "[4]", "[256]", "[3:1]", "[0:1]", "[abc:1]", "[-256:1]",
		"[256:3]", "[256:]", "[:4]", "[<:8]", "[256:1:2]", "[256:1,>:x]",
		"[256:1048577]", "256:1,3:1",
	};

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		const char *msg = parse_bad(TUN_roundup_power2_divisions, bad[i]);
		char quoted[64];

		snprintf(quoted, sizeof quoted, "invalid divisions '%s' (", bad[i]);
		assert_contains(msg, quoted);
		assert_contains(msg, "INTERVAL:DIVISIONS such as [256:1,512:2,>:8]");
		assert_contains(msg, "DIVISIONS is 0 or a power of two");
	}
	assert_string_equal(parse_bad(TUN_roundup_power2_divisions, "[256:1"),
			    "'[256:1' has no closing ']'");
	assert_string_equal(parse_bad(TUN_roundup_power2_divisions, "[256:1,,>:8]"),
			    "empty item in list '[256:1,,>:8]'");
}

/* ---- backends ---------------------------------------------------------------- */

static void backends_items(void **state)
{
	static const char *const ok[] = {"all", "cuda,hip", "[cuda, hip]", "^ze", "all,^ze",
					 "nv2", "my_gpu", "host"};
	static const char *const bad[] = {"CUDA", "cu-da", "^", "2cuda", "cuda hip", "^^ze",
					  "lib/cuda", "_x"};
	struct tunable_value v;

	(void)state;
	for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
		parse_ok(TUN_backends, ok[i], &v);
		tunable_value_free(&v);
	}
	parse_ok(TUN_backends, "cuda, ^ze", &v);
	assert_items(&v, (const char *const[]){"cuda", "^ze"}, 2);
	tunable_value_free(&v);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char expect[160];

		snprintf(expect, sizeof expect,
			 "invalid backend name '%s' (expected a name such as cuda, all, or ^name to "
			 "exclude one)",
			 bad[i]);
		assert_string_equal(parse_bad(TUN_backends, bad[i]), expect);
	}
	assert_contains(parse_bad(TUN_backends, "cuda,HIP"), "'HIP'");
}

/* ---- defaults and round trips ------------------------------------------------ */

static void defaults_parse(void **state)
{
	static const unsigned zero[DIVISION_INTERVALS];
	struct tunable_set set;

	(void)state;
	assert_int_equal(tunable_set_defaults(&set), 0);
	for (int i = 0; i < TUN_COUNT; i++)
		assert_string_equal(set.v[i].origin, "default");
	assert_true(set.v[TUN_caching].u.b);
	assert_int_equal(set.v[TUN_max_split_size_mb].special, TV_UNLIMITED);
	assert_int_equal(set.v[TUN_max_non_split_rounding_mb].u.size, 20 * MiB);
	assert_divisions(&set.v[TUN_roundup_power2_divisions], zero);
	assert_true(set.v[TUN_garbage_collection_threshold].u.f == 0.0);
	assert_true(set.v[TUN_memory_fraction].u.f == 1.0);
	assert_int_equal(set.v[TUN_large_segment_size_mb].u.size, 20 * MiB);
	assert_false(set.v[TUN_expandable_segments].u.b);
	assert_string_equal(set.v[TUN_trace].str, "");
	assert_int_equal(set.v[TUN_max_cache_ram].special, TV_AUTO);
	assert_int_equal(set.v[TUN_max_cache_vram].special, TV_AUTO);
	assert_int_equal(set.v[TUN_device_working_mem].special, TV_AUTO);
	assert_int_equal(set.v[TUN_load_workers].u.i, 2);
	assert_int_equal(set.v[TUN_staging_buffer_size].u.size, 16 * MiB);
	assert_int_equal(set.v[TUN_staging_buffers].u.i, 4);
	assert_int_equal(set.v[TUN_malloc_mmap_threshold].u.size, 0);
	assert_items(&set.v[TUN_backends], (const char *const[]){"all"}, 1);
	assert_string_equal(set.v[TUN_backend_path].str, BACKENDDIR);
	assert_int_equal(set.v[TUN_log_level].u.e, DEVCACHE_LOG_WARNING);
	tunable_set_free(&set);
}

static void assert_same_value(enum tunable_id id, const struct tunable_value *a,
			      const struct tunable_value *b)
{
	const char *name = tunable_defs[id].name;

	if (a->special != b->special)
		fail_msg("%s: special %d became %d", name, a->special, b->special);
	switch (tunable_defs[id].type) {
	case TT_BOOL:
		if (a->u.b != b->u.b)
			fail_msg("%s: %d became %d", name, a->u.b, b->u.b);
		break;
	case TT_INT:
		if (a->u.i != b->u.i)
			fail_msg("%s: %lld became %lld", name, a->u.i, b->u.i);
		break;
	case TT_FLOAT:
		if (a->u.f != b->u.f)
			fail_msg("%s: %.17g became %.17g", name, a->u.f, b->u.f);
		break;
	case TT_SIZE:
		if (a->u.size != b->u.size)
			fail_msg("%s: %llu bytes became %llu", name, (unsigned long long)a->u.size,
				 (unsigned long long)b->u.size);
		break;
	case TT_ENUM:
		if (a->u.e != b->u.e)
			fail_msg("%s: %d became %d", name, a->u.e, b->u.e);
		break;
	case TT_STRING:
		assert_string_equal(a->str, b->str);
		break;
	case TT_LIST:
		assert_string_equal(a->str, b->str);
		assert_int_equal(a->n_items, b->n_items);
		for (size_t i = 0; i < a->n_items; i++)
			assert_string_equal(a->items[i], b->items[i]);
		assert_memory_equal(a->divisions, b->divisions, sizeof a->divisions);
		break;
	}
}

/* Format value, parse the text again, and expect the same value and text. */
static void round_trip_at(enum tunable_id id, const struct tunable_value *v, int line)
{
	char text[4096], again[4096];
	struct tunable_value back;

	tunable_format(id, v, text, sizeof text);
	strcpy(why, "");
	if (tunable_parse(id, text, &back, why, sizeof why))
		fail_msg("line %d: %s formatted as '%s', which does not parse: %s", line,
			 tunable_defs[id].name, text, why);
	assert_same_value(id, v, &back);
	tunable_format(id, &back, again, sizeof again);
	assert_string_equal(again, text);
	tunable_value_free(&back);
}

static void defaults_round_trip(void **state)
{
	struct tunable_set set;

	(void)state;
	assert_int_equal(tunable_set_defaults(&set), 0);
	for (int i = 0; i < TUN_COUNT; i++)
		round_trip_at(i, &set.v[i], __LINE__);
	tunable_set_free(&set);
}

static void format_values(void **state)
{
	static const struct {
		enum tunable_id id;
		const char *in, *out;
	} cases[] = {
		{TUN_caching, "yes", "true"},
		{TUN_caching, "Off", "false"},
		{TUN_load_workers, " 08 ", "8"},
		{TUN_garbage_collection_threshold, "0.6", "0.6"},
		{TUN_memory_fraction, "1e-3", "0.001"},
		{TUN_max_split_size_mb, "512", "512M"},
		{TUN_max_split_size_mb, "2048", "2G"},
		{TUN_max_split_size_mb, "1.5G", "1536M"},
		{TUN_max_split_size_mb, "UNLIMITED", "unlimited"},
		{TUN_max_cache_ram, "Auto", "auto"},
		{TUN_max_cache_ram, "4096", "4K"},
		{TUN_max_cache_ram, "1000", "1000"},
		{TUN_staging_buffer_size, "65536", "64K"},
		{TUN_log_level, "DEBUG", "debug"},
		{TUN_log_level, "none", "none"},
		{TUN_trace, " /tmp/t ", "/tmp/t"},
		{TUN_backends, "cuda, hip", "cuda,hip"},
		{TUN_backends, "[ cuda ,^ze ]", "[cuda,^ze]"},
		{TUN_roundup_power2_divisions, "[256:1, 512:2, >:8]", "[256:1,512:2,>:8]"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct tunable_value v;
		char text[256];

		parse_ok(cases[i].id, cases[i].in, &v);
		tunable_format(cases[i].id, &v, text, sizeof text);
		assert_string_equal(text, cases[i].out);
		round_trip_at(cases[i].id, &v, __LINE__);
		tunable_value_free(&v);
	}
}

/* A size of a *_mb tunable that is no whole number of KiB formats as a bare
 * number, which reads back as MiB: 20971521 bytes would become 20 TiB. */
static void format_mib_size_round_trip(void **state)
{
	struct tunable_value v;

	(void)state;
	parse_ok(TUN_max_split_size_mb, "20971521B", &v);
	assert_int_equal(v.u.size, 20971521);
	round_trip_at(TUN_max_split_size_mb, &v, __LINE__);
	parse_ok(TUN_large_segment_size_mb, "2097153B", &v);
	round_trip_at(TUN_large_segment_size_mb, &v, __LINE__);
}

/* A float is formatted with %g, six significant digits: the value in effect
 * (and the text backends and `devcache config` see) is not the one set. */
static void format_float_round_trip(void **state)
{
	struct tunable_value v;

	(void)state;
	parse_ok(TUN_memory_fraction, "0.1234567", &v);
	round_trip_at(TUN_memory_fraction, &v, __LINE__);
	parse_ok(TUN_garbage_collection_threshold, "0.99999999", &v);
	round_trip_at(TUN_garbage_collection_threshold, &v, __LINE__);
}

static void format_size_outputs(void **state)
{
	static const struct {
		uint64_t bytes;
		const char *text;
	} cases[] = {
		{0, "0"},
		{1, "1"},
		{512, "512"},
		{1023, "1023"},
		{1024, "1K"},
		{1536, "1536"},
		{65536, "64K"},
		{20 * MiB, "20M"},
		{20 * MiB + 1024, "20481K"},
		{3 * GiB / 2, "1536M"},
		{GiB, "1G"},
		{1ULL << 40, "1T"},
		{1ULL << 50, "1024T"},
		{UINT64_MAX, "18446744073709551615"},
	};
	char buf[32];

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		format_size(cases[i].bytes, buf, sizeof buf);
		assert_string_equal(buf, cases[i].text);
	}
	format_size(123456, buf, 4);
	assert_string_equal(buf, "123");
}

/* The form people read, in messages, summaries and the tool alike. */
static void format_bytes_outputs(void **state)
{
	static const struct {
		uint64_t bytes;
		const char *text;
	} cases[] = {
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{20 * MiB, "20.0 MiB"},
		{3 * GiB / 2, "1.5 GiB"},
		{1ULL << 40, "1.0 TiB"},
		{1ULL << 50, "1024.0 TiB"},
	};
	char buf[32];

	(void)state;
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		format_bytes(cases[i].bytes, buf, sizeof buf);
		assert_string_equal(buf, cases[i].text);
	}
	format_bytes(1536, buf, 4);
	assert_string_equal(buf, "1.5");
}

/* ---- names ------------------------------------------------------------------- */

static void suggest_names(void **state)
{
	(void)state;
	assert_string_equal(tunable_suggest("max_split_size"), "max_split_size_mb");
	assert_string_equal(tunable_suggest("garbage_colection_threshold"),
			    "garbage_collection_threshold");
	assert_string_equal(tunable_suggest("LOG_LEVEL"), "log_level");
	assert_string_equal(tunable_suggest("log_levle"), "log_level");
	assert_string_equal(tunable_suggest("backend"), "backends");
	assert_null(tunable_suggest("nonsense"));
	assert_null(tunable_suggest("frobnicate"));
	assert_null(tunable_suggest(""));
	assert_null(tunable_suggest("max_"));
}

static void find_names(void **state)
{
	(void)state;
	assert_int_equal(tunable_find("log_level"), TUN_log_level);
	assert_int_equal(tunable_find("caching"), TUN_caching);
	assert_int_equal(tunable_find("LOG_LEVEL"), -1);
	assert_int_equal(tunable_find("backend"), -1);
	assert_true(compat_find("backend") >= 0);
	assert_string_equal(compat_defs[compat_find("backend")].name, "backend");
	assert_true(compat_find("release_lock_on_cudamalloc") >= 0);
	assert_int_equal(compat_find("backends"), -1);
	assert_int_equal(compat_find("log_level"), -1);
}

static void assign_replaces(void **state)
{
	struct tunable_set set;
	struct tunable_value v;

	(void)state;
	assert_int_equal(tunable_set_defaults(&set), 0);
	parse_ok(TUN_backends, "cuda,hip", &v);
	assert_int_equal(tunable_assign(&set, TUN_backends, &v, "first"), 0);
	assert_null(v.items);
	assert_null(v.str);
	parse_ok(TUN_backends, "ze", &v);
	assert_int_equal(tunable_assign(&set, TUN_backends, &v, "second"), 0);
	assert_string_equal(set.v[TUN_backends].origin, "second");
	assert_items(&set.v[TUN_backends], (const char *const[]){"ze"}, 1);
	tunable_set_free(&set);
}

/* Only distances up to 3 matter (a typo); further ones are SIZE_MAX, found
 * in a few steps rather than a whole table per known name. */
static void distance_is_capped(void **state)
{
	(void)state;
	assert_int_equal(name_distance("log_level", "log_level"), 0);
	assert_int_equal(name_distance("LOG_levle", "log_level"), 2);
	assert_int_equal(name_distance("max_split", "max_split_siz"), SIZE_MAX);
	assert_int_equal(name_distance("max_split", "max_split_si"), 3);
	assert_int_equal(name_distance("abcdefgh", "stuvwxyz"), SIZE_MAX);
	assert_int_equal(name_distance("", "abc"), 3);
	assert_int_equal(name_distance("", "abcd"), SIZE_MAX);
}

/* Keys the core does not know wait for the backend modules; a distinct
 * key beyond PENDING_MAX is refused, naming the limit, so that neither
 * their lookup nor the modules' passes over them grow with the square of
 * the input.  The same key again replaces the value it had. */
static void pending_keys_are_capped(void **state)
{
	struct tunable_set set;
	char key[32], expect[256];

	(void)state;
	assert_int_equal(tunable_set_defaults(&set), 0);
	for (unsigned i = 0; i < PENDING_MAX; i++) {
		snprintf(key, sizeof key, "mod_key%u", i);
		assert_int_equal(tunable_set_pending(&set, key, "1", "TEST"), 0);
	}
	for (unsigned i = 0; i < 1000; i++)
		assert_int_equal(tunable_set_pending(&set, "mod_key7", "2", "AGAIN"), 0);
	assert_int_equal(set.n_pending, PENDING_MAX);
	assert_string_equal(set.pending[7].value, "2");
	assert_string_equal(set.pending[7].origin, "AGAIN");
	assert_int_equal(tunable_set_pending(&set, "mod_one_more", "1", "TEST"), DEVCACHE_ECONFIG);
	snprintf(expect, sizeof expect,
		 "TEST: unknown tunable 'mod_one_more': more than %u tunables unknown to the core "
		 "(perhaps backend modules') are set",
		 PENDING_MAX);
	assert_string_equal(devcache_last_error(), expect);
	assert_int_equal(set.n_pending, PENDING_MAX);
	tunable_set_free(&set);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(distance_is_capped),
		cmocka_unit_test(pending_keys_are_capped),
		cmocka_unit_test(bool_spellings),
		cmocka_unit_test(bool_errors),
		cmocka_unit_test(int_values_and_range),
		cmocka_unit_test(int_errors),
		cmocka_unit_test(float_half_open_ranges),
		cmocka_unit_test(float_errors),
		cmocka_unit_test(size_units),
		cmocka_unit_test(size_decimals),
		cmocka_unit_test(size_decimal_rounding),
		cmocka_unit_test(size_mib_default),
		cmocka_unit_test(size_ranges),
		cmocka_unit_test(size_auto_and_unlimited),
		cmocka_unit_test(size_errors),
		cmocka_unit_test(enum_values),
		cmocka_unit_test(enum_errors),
		cmocka_unit_test(string_values),
		cmocka_unit_test(list_forms),
		cmocka_unit_test(list_errors),
		cmocka_unit_test(divisions_single_value),
		cmocka_unit_test(divisions_pytorch_table),
		cmocka_unit_test(divisions_gaps_and_clamping),
		cmocka_unit_test(divisions_errors),
		cmocka_unit_test(backends_items),
		cmocka_unit_test(defaults_parse),
		cmocka_unit_test(defaults_round_trip),
		cmocka_unit_test(format_values),
		cmocka_unit_test(format_mib_size_round_trip),
		cmocka_unit_test(format_float_round_trip),
		cmocka_unit_test(format_size_outputs),
		cmocka_unit_test(format_bytes_outputs),
		cmocka_unit_test(suggest_names),
		cmocka_unit_test(find_names),
		cmocka_unit_test(assign_replaces),
	};
	return RUN_TAP(tests);
}
