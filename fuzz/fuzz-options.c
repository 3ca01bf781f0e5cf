/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fuzz-options.c - fuzz target: an option string ("key:value,key:value", as DEVCACHE_OPTIONS and devcache_open() take it) through the configuration parser. */
#include "fuzz.h"
#include "fuzz-tunables.h"

#include <stdlib.h>

/*
 * The parser devcache_open() runs on its options, without the rest of
 * devcache_open(): an input could otherwise name a trace file to write
 * or a folder of modules to dlopen().  Option strings are short; longer
 * inputs are not tried (see the cap in the hardening issue: quadratic
 * list continuations are its own fix).
 */
#define MAX_OPTIONS 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tunable_set set;
	struct log_state log;
	char *text;

	if (size > MAX_OPTIONS || !(text = fuzz_strndup(data, size)))
		return -1;
	if (tunable_set_defaults(&set) != 0)
		abort();
	fuzz_log_init(&log);
	if (config_apply_string(&set, text, "devcache_open", &log) == 0)
		fuzz_check_tunables(&set);
	log_destroy(&log);
	tunable_set_free(&set);
	free(text);
	return 0;
}
