/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fake-controls.h - the test controls the fake vendor runtimes share: call counts, fault injection, environment. */
#ifndef FAKE_CONTROLS_H
#define FAKE_CONTROLS_H

/* strdup and strtok_r want the _GNU_SOURCE each fake defines before any include. */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Everything here is static, or hidden (FAKE_INTERNAL): a fake exports the
 * vendor's API and its own fake_<vendor>_* controls (which
 * FAKE_CONTROLS_EXPORTS defines), and nothing else of this header. The
 * helpers are inline so that a fake using only some of them compiles
 * without warnings. */

/* Or'ed into nth, it makes every call from the nth on fail, not the nth
 * alone; each fake names it FAKE_<VENDOR>_FAIL_ON for its tests. */
#define FAKE_CONTROLS_FAIL_ON 0x80000000u

/* A vendor's status code: by its name, as FAKE_<VENDOR>_FAIL may give it,
 * and with the text the vendor's error string function gives, where it has one.
 * An int holds any vendor's code, as C's enum constants are ints. */
struct fake_code {
	int code;
	const char *name;
	const char *text; /* NULL where the API has no error strings */
};

/* One API function's counts; tests call the fakes from many threads, so
 * every access is atomic. */
struct fake_counter {
	unsigned long calls;
	unsigned fault_at; /* calls to go before the failing one, | FAKE_CONTROLS_FAIL_ON; 0: none */
	int fault_code;
	unsigned long misuses; /* calls refused as a misuse of the API */
};

/* What a fake keeps to itself: a fake built from several files shares its
 * state between them, and exports none of it, whatever -fvisibility the
 * build uses. */
#define FAKE_INTERNAL __attribute__((visibility("hidden")))

/* The function the calling thread is in, for fake_controls_misuse: one per
 * fake library (FAKE_CONTROLS_EXPORTS defines it), as a misuse may be said
 * in another of the fake's files than the one its call entered in. */
extern __thread int fake_controls_current FAKE_INTERNAL;

/* What a fake tells the shared controls about itself. */
struct fake_controls {
	const char *fake;              /* "fake-cuda": what every message begins with */
	const char *fail_function;     /* "fake_cuda_fail": the test control a message may name */
	const char *fail_env;          /* "FAKE_CUDA_FAIL" */
	const char *code_word;         /* "error", or "result" where the API says so */
	long code_max;                 /* INT_MAX, or UINT_MAX where codes are written unsigned */
	const char *const *functions;  /* the fake's function list, by the names it exports */
	int n_functions;
	struct fake_counter *counters; /* n_functions of them, in the same order */
	const struct fake_code *codes;
	size_t n_codes;
};

static inline int fake_controls_function_index(const struct fake_controls *c, const char *name)
{
	if (!name)
		return -1;
	for (int i = 0; i < c->n_functions; i++)
		if (strcmp(name, c->functions[i]) == 0)
			return i;
	return -1;
}

/* The index of code in c->codes, or -1. */
static inline int fake_controls_code_index(const struct fake_controls *c, int code)
{
	for (size_t i = 0; i < c->n_codes; i++)
		if (c->codes[i].code == code)
			return (int)i;
	return -1;
}

/* What fake_<vendor>_fail does: the nth call from now of function fails with code. */
static inline void fake_controls_fail(const struct fake_controls *c, const char *function,
				      unsigned nth, int code)
{
	int f = fake_controls_function_index(c, function);

	if (f < 0) {
		/* A typo in a test would otherwise arm nothing and pass. */
		fprintf(stderr, "%s: %s: no function %s\n", c->fake, c->fail_function,
			function ? function : "(null)");
		return;
	}
	__atomic_store_n(&c->counters[f].fault_code, code, __ATOMIC_RELAXED);
	__atomic_store_n(&c->counters[f].fault_at, nth, __ATOMIC_RELEASE);
}

/* What fake_<vendor>_calls does. */
static inline unsigned long fake_controls_calls(const struct fake_controls *c,
						const char *function)
{
	int f = fake_controls_function_index(c, function);

	return f < 0 ? 0 : __atomic_load_n(&c->counters[f].calls, __ATOMIC_RELAXED);
}

/* What fake_<vendor>_function does: the name of the fake's function i, in the
 * order of its list, or NULL past its end; a test walks the list to read
 * every function's count. */
static inline const char *fake_controls_function(const struct fake_controls *c, unsigned i)
{
	return i < (unsigned)c->n_functions ? c->functions[i] : NULL;
}

/* Counts a call of function f; returns the code it is to fail with, or 0,
 * which is success in every API the fakes stand in for. */
static inline int fake_controls_enter(const struct fake_controls *c, int f)
{
	struct fake_counter *counter = &c->counters[f];
	unsigned n = __atomic_load_n(&counter->fault_at, __ATOMIC_ACQUIRE), next;

	fake_controls_current = f;
	__atomic_add_fetch(&counter->calls, 1, __ATOMIC_RELAXED);
	do {
		if ((n & ~FAKE_CONTROLS_FAIL_ON) == 0)
			return 0;
		/* Count down to 1; from then on, FAKE_CONTROLS_FAIL_ON stays armed. */
		next = (n & ~FAKE_CONTROLS_FAIL_ON) == 1 ? (n & FAKE_CONTROLS_FAIL_ON ? n : 0)
							 : n - 1;
	} while (!__atomic_compare_exchange_n(&counter->fault_at, &n, next, 0, __ATOMIC_ACQUIRE,
					      __ATOMIC_ACQUIRE));
	if ((n & ~FAKE_CONTROLS_FAIL_ON) != 1)
		return 0;
	return __atomic_load_n(&counter->fault_code, __ATOMIC_RELAXED);
}

/* The function being called refuses it as a misuse of the API (an unknown
 * or freed handle or pointer, a double free, a bad argument): counted and
 * said, so that a test sees a misuse that its caller ignores. Returns code. */
static inline int fake_controls_misuse(const struct fake_controls *c, int code)
{
	int f = fake_controls_current, i = fake_controls_code_index(c, code);

	if (f < 0)
		return code;
	__atomic_add_fetch(&c->counters[f].misuses, 1, __ATOMIC_RELAXED);
	if (i >= 0)
		fprintf(stderr, "%s: %s: refused as a misuse: %s\n", c->fake, c->functions[f],
			c->codes[i].name);
	else
		fprintf(stderr, "%s: %s: refused as a misuse: %s %d\n", c->fake, c->functions[f],
			c->code_word, code);
	return code;
}

/* What fake_<vendor>_misuses does: the calls of function refused as
 * misuses, or of every function when it is NULL. */
static inline unsigned long fake_controls_misuses(const struct fake_controls *c,
						  const char *function)
{
	unsigned long n = 0;

	for (int i = 0; i < c->n_functions; i++)
		if (!function || strcmp(function, c->functions[i]) == 0)
			n += __atomic_load_n(&c->counters[i].misuses, __ATOMIC_RELAXED);
	return n;
}

/* A code given by name or by number, as in FAKE_<VENDOR>_FAIL. */
static inline int fake_controls_parse_code(const struct fake_controls *c, const char *s,
					   int *code_p)
{
	char *end;
	long v;

	for (size_t i = 0; i < c->n_codes; i++)
		if (strcmp(s, c->codes[i].name) == 0) {
			*code_p = c->codes[i].code;
			return 0;
		}
	errno = 0;
	v = strtol(s, &end, 0);
	if (errno || end == s || *end || v < INT_MIN || v > c->code_max)
		return -1;
	/* Level Zero's 0x78000004 and the like may be written unsigned. */
	*code_p = (int)(unsigned)v;
	return 0;
}

/* One FAKE_<VENDOR>_FAIL entry, "function:nth:code"; entry is modified. */
static inline void fake_controls_parse_entry(const struct fake_controls *c, char *entry)
{
	char *nth_s = strchr(entry, ':'), *code_s = NULL, *end;
	unsigned long nth = 0;
	int code = 0, ok = 0;

	if (nth_s) {
		*nth_s++ = '\0';
		code_s = strchr(nth_s, ':');
		if (code_s)
			*code_s++ = '\0';
	}
	if (code_s) {
		errno = 0;
		nth = strtoul(nth_s, &end, 0);
		ok = !errno && end != nth_s && !*end && nth <= UINT_MAX &&
		     fake_controls_parse_code(c, code_s, &code) == 0 &&
		     fake_controls_function_index(c, entry) >= 0;
	}
	if (!ok) {
		/* Put the entry back together to show it as it was written. */
		if (nth_s)
			nth_s[-1] = ':';
		if (code_s)
			code_s[-1] = ':';
		fprintf(stderr, "%s: %s: ignoring \"%s\" (want function:nth:%s)\n", c->fake,
			c->fail_env, entry, c->code_word);
		return;
	}
	fake_controls_fail(c, entry, (unsigned)nth, code);
}

/* Arms the faults FAKE_<VENDOR>_FAIL lists, "function:nth:code,...": for
 * the fake's constructor, so that a program run under it fails from the start. */
static inline void fake_controls_load(const struct fake_controls *c)
{
	const char *env = getenv(c->fail_env);
	char *copy, *entry, *save;

	if (!env || !*env)
		return;
	copy = strdup(env);
	if (!copy) {
		fprintf(stderr, "%s: %s: out of memory\n", c->fake, c->fail_env);
		return;
	}
	for (entry = strtok_r(copy, ",", &save); entry; entry = strtok_r(NULL, ",", &save))
		fake_controls_parse_entry(c, entry);
	free(copy);
}

/* A fake's struct fake_controls: the fake is "fake-" vendor, its fault
 * variable FAKE_<VENDOR>_FAIL; word and max are its code_word and code_max;
 * names, counters_ and codes_ are arrays: its function list, its counters
 * (as many), its codes. */
#define FAKE_CONTROLS_INIT(vendor, VENDOR, word, max, names, counters_, codes_)                    \
	{                                                                                          \
		.fake = "fake-" #vendor, .fail_function = "fake_" #vendor "_fail",                 \
		.fail_env = "FAKE_" #VENDOR "_FAIL", .code_word = (word), .code_max = (max),       \
		.functions = (names), .n_functions = (int)(sizeof(names) / sizeof *(names)),       \
		.counters = (counters_), .codes = (codes_),                                        \
		.n_codes = sizeof(codes_) / sizeof *(codes_)                                       \
	}

/* Defines the fake's misuse(code), what the call being made refuses as
 * the caller's misuse (counted, said), and enter(f), which counts a call
 * of function f and returns the code it is to fail with, or 0: on its
 * controls c, in its API's status type. */
#define FAKE_CONTROLS_CALLS(type, c)                                                               \
	static inline type misuse(type code)                                                       \
	{                                                                                          \
		return (type)fake_controls_misuse(&(c), (int)code);                                \
	}                                                                                          \
	static inline type enter(int f)                                                            \
	{                                                                                          \
		return (type)fake_controls_enter(&(c), f);                                         \
	}

/* Declares, in a fake's header, what FAKE_CONTROLS_EXPORTS defines. */
#define FAKE_CONTROLS_DECLARE(vendor)                                                              \
	void fake_##vendor##_fail(const char *function, unsigned nth, int code);                   \
	unsigned long fake_##vendor##_calls(const char *function);                                \
	const char *fake_##vendor##_function(unsigned i);                                          \
	unsigned long fake_##vendor##_misuses(const char *function)

/* Defines, in one file of a fake, the test controls every fake exports on
 * its controls c: fake_<vendor>_fail(function, nth, code), _calls(function),
 * _function(i) and _misuses(function), which the fake declares beside its
 * own; and the calling thread's current function. */
#define FAKE_CONTROLS_EXPORTS(vendor, c)                                                           \
	__thread int fake_controls_current = -1;                                                   \
	void fake_##vendor##_fail(const char *function, unsigned nth, int code)                    \
	{                                                                                          \
		fake_controls_fail(&(c), function, nth, code);                                     \
	}                                                                                          \
	unsigned long fake_##vendor##_calls(const char *function)                                 \
	{                                                                                          \
		return fake_controls_calls(&(c), function);                                        \
	}                                                                                          \
	const char *fake_##vendor##_function(unsigned i)                                           \
	{                                                                                          \
		return fake_controls_function(&(c), i);                                            \
	}                                                                                          \
	unsigned long fake_##vendor##_misuses(const char *function)                               \
	{                                                                                          \
		return fake_controls_misuses(&(c), function);                                      \
	}

/* A decimal number from the environment variable name, or dflt where it is
 * unset or empty; a value that is no number from min to max is said, not
 * quietly taken, as a test's typo would otherwise go unseen. */
static inline long fake_controls_env_number(const struct fake_controls *c, const char *name,
					    long dflt, long min, long max)
{
	const char *s = getenv(name);
	char *end;
	long v;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max) {
		fprintf(stderr, "%s: %s=%s is not a number from %ld to %ld; using %ld\n", c->fake,
			name, s, min, max, dflt);
		return dflt;
	}
	return v;
}

#endif
