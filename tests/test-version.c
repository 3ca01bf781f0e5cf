/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-version.c - the headers' version macros agree with the library actually linked. */
#include "tap.h"

#include <stdio.h>

#include <devcache.h>

static void macro_matches_runtime(void **state)
{
	(void)state;
	assert_int_equal(devcache_version(), DEVCACHE_VERSION);
	assert_string_equal(devcache_version_string(), DEVCACHE_VERSION_STRING);
}

static void string_matches_numbers(void **state)
{
	char expect[32];

	(void)state;
	snprintf(expect, sizeof expect, "%d.%d.%d", DEVCACHE_VERSION_MAJOR, DEVCACHE_VERSION_MINOR,
		 DEVCACHE_VERSION_MICRO);
	assert_string_equal(devcache_version_string(), expect);
	assert_int_equal(devcache_version() >> 16, DEVCACHE_VERSION_MAJOR);
	assert_int_equal((devcache_version() >> 8) & 0xff, DEVCACHE_VERSION_MINOR);
	assert_int_equal(devcache_version() & 0xff, DEVCACHE_VERSION_MICRO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(macro_matches_runtime),
		cmocka_unit_test(string_matches_numbers),
	};
	return RUN_TAP(tests);
}
