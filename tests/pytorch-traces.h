/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pytorch-traces.h - generated allocation traces of PyTorch programs (training, decoding, switching models), for the differential test and the benchmark. */
#ifndef DEVCACHE_PYTORCH_TRACES_H
#define DEVCACHE_PYTORCH_TRACES_H

#include <stddef.h>
#include <stdint.h>

enum ev_kind { EV_ALLOC, EV_FREE, EV_EMPTY_CACHE };

struct event {
	uint8_t kind;
	uint8_t stream; /* EV_ALLOC: 0, the default stream, or 1 */
	uint32_t id;    /* the tensor: EV_ALLOC numbers them from 0 */
	uint64_t size;
};

struct trace {
	const char *name;
	struct event *ev;
	size_t n, cap;
	uint32_t tensors;
};

/* Appends e to t, whose events grow as needed; out of host memory, as
 * below. */
void trace_push(struct trace *t, struct event e);

/* Each appends its trace to t, which starts zeroed, and names it; the
 * caller frees t->ev.  Out of host memory, they print a message and exit
 * with status 99 (a hard error to automake's test drivers). */
void gen_training(struct trace *t);
void gen_decoding(struct trace *t);
void gen_switching(struct trace *t);

#endif
