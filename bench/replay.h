/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* replay.h - bench/replay's parts: a parsed trace and one replay of it through devcache. */
#ifndef DEVCACHE_BENCH_REPLAY_H
#define DEVCACHE_BENCH_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <devcache.h>

/* The trace is parsed once into an array of events whose frees name the
 * allocation they release by its ordinal, so a replay itself does no
 * parsing and no hashing: what is timed is the allocator. */
enum ev_kind { EV_ALLOC, EV_FREE, EV_WARMUP_END, EV_STEP };

struct event {
	uint64_t size; /* EV_ALLOC: bytes asked for; EV_FREE: the allocation's ordinal */
	uint32_t stream;
	uint8_t kind;
};

struct trace {
	const char *name;
	struct event *ev;
	size_t n, cap;
	size_t allocs, frees;
	unsigned max_stream;
	bool has_warmup;
};

struct outcome {
	bool failed;
	char error[512];
	double seconds;
	size_t ops;
	devcache_stats_t stats;         /* at the end, before the leftovers are freed */
	uint64_t dev_allocs_after_warmup;
	uint64_t peak_requested;        /* counted here, to check the allocator's own */
	unsigned steps_after_warmup;
};

#define REPLAY_SUMMARY 1u     /* -v and -S: the summary, the snapshot after it */
#define REPLAY_EMPTY_STEPS 2u /* -E: devcache_empty_cache() at each step */

/* Replays the whole trace on the host device of a fresh context opened
 * with options (NULL: the defaults).  0, or -1 with o->failed and
 * o->error; exits 2 when the context or the device cannot be had. */
int replay(const struct trace *t, const char *options, unsigned flags, struct outcome *o);

#endif
