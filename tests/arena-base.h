/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* arena-base.h - the address the arena test device's first-fit offsets count from, for tests that compare addresses. */
#ifndef DEVCACHE_TEST_ARENA_BASE_H
#define DEVCACHE_TEST_ARENA_BASE_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>

/* The arena module (tests/modules/arena.c), loaded by a context that uses
 * it, gives its base through dlsym(): the same calls give the same
 * offsets from it, in one context or in two, one after the other. */
static inline uintptr_t arena_base(void)
{
	char path[4096];
	void *module;
	uintptr_t (*base)(void);

	snprintf(path, sizeof path, "%s/arena.so", test_env("TEST_ARENA"));
	if (!(module = dlopen(path, RTLD_NOW | RTLD_NOLOAD)))
		fail_msg("the arena module is not loaded: %s", dlerror());
	*(void **)&base = dlsym(module, "arena_base");
	assert_non_null(base);
	uintptr_t at = base();
	dlclose(module);
	assert_true(at != 0);
	return at;
}

#endif
