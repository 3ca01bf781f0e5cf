/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pytorch-traces.c - generated allocation traces of PyTorch programs (training, decoding, switching models), for the differential test and the benchmark. */
#include "config.h"

#include "pytorch-traces.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Traces are made before any test runs, outside cmocka's reach. */
static void *must(void *p)
{
	if (!p) {
		fprintf(stderr, "%s: out of memory making the traces\n", program_invocation_short_name);
		exit(99);
	}
	return p;
}

void trace_push(struct trace *t, struct event e)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 4096;
		t->ev = must(realloc(t->ev, t->cap * sizeof *t->ev));
	}
	t->ev[t->n++] = e;
}

static uint32_t t_alloc(struct trace *t, uint64_t size, unsigned stream)
{
	trace_push(t, (struct event){.kind = EV_ALLOC, .stream = (uint8_t)stream, .id = t->tensors,
				     .size = size});
	return t->tensors++;
}

static void t_free(struct trace *t, uint32_t id)
{
	trace_push(t, (struct event){.kind = EV_FREE, .id = id});
}

static void t_empty_cache(struct trace *t)
{
	trace_push(t, (struct event){.kind = EV_EMPTY_CACHE});
}

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static uint64_t pick(uint64_t *s, uint64_t lo, uint64_t hi)
{
	return lo + rng_next(s) % (hi - lo + 1);
}

/* Training a small transformer in fp16 with Adam: weights, then steps of
 * varying batch and sequence length; the forward keeps activations layer
 * by layer, the backward frees them in reverse while it allocates the
 * gradients; the optimizer's state appears at the first step; the batch
 * comes in on a second stream; every fourth step is an evaluation; at the
 * end everything is freed and the cache emptied. */
void gen_training(struct trace *t)
{
	enum { L = 6, H = 768, NH = 12, V = 16000, STEPS = 12 };
	uint64_t rng = 0x747261696e696e67ull;
	uint64_t psize[4 + 12 * L];
	uint32_t param[4 + 12 * L], grad[4 + 12 * L], adam[2 * (4 + 12 * L)];
	size_t np = 0;

	t->name = "training";
	psize[np++] = (uint64_t)V * H * 2; /* embedding, tied with the output */
	psize[np++] = (uint64_t)1024 * H * 2; /* positions */
	for (int l = 0; l < L; l++) {
		uint64_t per[12] = {H * 2, H * 2, 3ull * H * H * 2, 3ull * H * 2, (uint64_t)H * H * 2,
				    H * 2, H * 2, H * 2, 4ull * H * H * 2, 4ull * H * 2,
				    4ull * H * H * 2, H * 2};
		for (int k = 0; k < 12; k++)
			psize[np++] = per[k];
	}
	psize[np++] = H * 2; /* final layer norm */
	psize[np++] = H * 2;
	for (size_t i = 0; i < np; i++)
		param[i] = t_alloc(t, psize[i], 0);

	for (int step = 0; step < STEPS; step++) {
		static const uint64_t batches[] = {2, 4, 6, 8, 12};
		static const uint64_t lengths[] = {128, 192, 256, 384, 512};
		uint64_t b, s;
		bool eval = step % 4 == 3;

		do {
			b = batches[pick(&rng, 0, 4)];
			s = lengths[pick(&rng, 0, 4)];
		} while (b * s > 4096);
		uint64_t tok = b * s, act = tok * H * 2, att = b * NH * s * s * 2;
		uint32_t in = t_alloc(t, tok * 8, 1), tgt = t_alloc(t, tok * 8, 1);
		uint32_t saved[L][12], x = t_alloc(t, act, 0);

		for (int l = 0; l < L; l++) {
			uint32_t ln = t_alloc(t, act, 0), mu = t_alloc(t, tok * 4, 0),
				 rs = t_alloc(t, tok * 4, 0), qkv = t_alloc(t, 3 * act, 0),
				 sc = t_alloc(t, att, 0), pr = t_alloc(t, att, 0);
			t_free(t, sc);
			uint32_t dm = t_alloc(t, att / 2, 0), ao = t_alloc(t, act, 0),
				 po = t_alloc(t, act, 0), x2 = t_alloc(t, act, 0);
			t_free(t, po);
			uint32_t ln2 = t_alloc(t, act, 0), mu2 = t_alloc(t, tok * 4, 0),
				 rs2 = t_alloc(t, tok * 4, 0), h1 = t_alloc(t, 4 * act, 0),
				 g = t_alloc(t, 4 * act, 0), o = t_alloc(t, act, 0),
				 x3 = t_alloc(t, act, 0);
			t_free(t, o);
			uint32_t keep[12] = {x, ln, mu, rs, qkv, pr, dm, ao, x2, ln2, h1, g};
			memcpy(saved[l], keep, sizeof keep);
			if (eval) /* no_grad: nothing is kept for a backward */
				for (int k = 0; k < 12; k++)
					t_free(t, saved[l][k]);
			t_free(t, mu2);
			t_free(t, rs2);
			x = x3;
		}
		uint32_t lnf = t_alloc(t, act, 0), logits = t_alloc(t, tok * V * 2, 0);
		uint32_t lsm = t_alloc(t, tok * V * 4, 0), loss = t_alloc(t, 4, 0);
		if (eval) {
			t_free(t, lsm);
			t_free(t, logits);
			t_free(t, lnf);
			t_free(t, x);
			t_free(t, loss);
			t_free(t, in);
			t_free(t, tgt);
			continue;
		}
		/* backward */
		uint32_t dlog = t_alloc(t, tok * V * 2, 0);
		t_free(t, lsm);
		t_free(t, logits);
		grad[0] = t_alloc(t, psize[0], 0);
		uint32_t dx = t_alloc(t, act, 0);
		t_free(t, dlog);
		t_free(t, lnf);
		t_free(t, x);
		grad[np - 2] = t_alloc(t, psize[np - 2], 0);
		grad[np - 1] = t_alloc(t, psize[np - 1], 0);
		for (int l = L - 1; l >= 0; l--) {
			size_t p0 = 2 + 12 * (size_t)l;
			uint32_t dh = t_alloc(t, 4 * act, 0);
			grad[p0 + 10] = t_alloc(t, psize[p0 + 10], 0);
			grad[p0 + 11] = t_alloc(t, psize[p0 + 11], 0);
			t_free(t, saved[l][11]);
			uint32_t dg = t_alloc(t, 4 * act, 0);
			t_free(t, dh);
			t_free(t, saved[l][10]);
			grad[p0 + 8] = t_alloc(t, psize[p0 + 8], 0);
			grad[p0 + 9] = t_alloc(t, psize[p0 + 9], 0);
			uint32_t dln2 = t_alloc(t, act, 0);
			t_free(t, dg);
			grad[p0 + 6] = t_alloc(t, psize[p0 + 6], 0);
			grad[p0 + 7] = t_alloc(t, psize[p0 + 7], 0);
			t_free(t, saved[l][9]);
			uint32_t dx2 = t_alloc(t, act, 0);
			t_free(t, dln2);
			t_free(t, dx);
			t_free(t, saved[l][8]);
			grad[p0 + 4] = t_alloc(t, psize[p0 + 4], 0);
			grad[p0 + 5] = t_alloc(t, psize[p0 + 5], 0);
			uint32_t dao = t_alloc(t, act, 0);
			t_free(t, saved[l][7]);
			uint32_t dpr = t_alloc(t, att, 0);
			t_free(t, saved[l][6]);
			uint32_t dsc = t_alloc(t, att, 0);
			t_free(t, dpr);
			t_free(t, saved[l][5]);
			uint32_t dqkv = t_alloc(t, 3 * act, 0);
			t_free(t, dsc);
			t_free(t, dao);
			t_free(t, saved[l][4]);
			grad[p0 + 2] = t_alloc(t, psize[p0 + 2], 0);
			grad[p0 + 3] = t_alloc(t, psize[p0 + 3], 0);
			uint32_t dln = t_alloc(t, act, 0);
			t_free(t, dqkv);
			grad[p0 + 0] = t_alloc(t, psize[p0 + 0], 0);
			grad[p0 + 1] = t_alloc(t, psize[p0 + 1], 0);
			t_free(t, saved[l][3]);
			t_free(t, saved[l][2]);
			t_free(t, saved[l][1]);
			dx = t_alloc(t, act, 0);
			t_free(t, dln);
			t_free(t, dx2);
			t_free(t, saved[l][0]);
		}
		grad[1] = t_alloc(t, psize[1], 0);
		t_free(t, dx);
		t_free(t, loss);
		/* Adam: fp32 moments from the first step; a temporary per parameter */
		for (size_t i = 0; i < np; i++) {
			if (step == 0) {
				adam[2 * i] = t_alloc(t, 2 * psize[i], 0);
				adam[2 * i + 1] = t_alloc(t, 2 * psize[i], 0);
			}
			uint32_t tmp = t_alloc(t, 2 * psize[i], 0);
			t_free(t, tmp);
		}
		for (size_t i = 0; i < np; i++) /* zero_grad(set_to_none=True) */
			t_free(t, grad[i]);
		t_free(t, in);
		t_free(t, tgt);
	}
	/* done: the model and its optimizer go, and the cache with them */
	for (size_t i = 0; i < np; i++) {
		t_free(t, adam[2 * i]);
		t_free(t, adam[2 * i + 1]);
		t_free(t, param[i]);
	}
	t_empty_cache(t);
}

/* Decoding with a naive KV cache: each new token makes every layer's keys
 * and values one position longer (a new tensor, the old one freed), with
 * small temporaries per step; batches of varying size and prompt length,
 * each prefilled on a second stream. */
void gen_decoding(struct trace *t)
{
	enum { L = 3, H = 2048, NH = 16, V = 32000, EVENTS = 6000 };
	uint64_t rng = 0x6465636f64696e67ull;
	uint32_t w[L * 8 + 2];
	size_t nw = 0;

	t->name = "decoding";
	w[nw++] = t_alloc(t, (uint64_t)V * H * 2, 0);
	for (int l = 0; l < L; l++) {
		uint64_t per[8] = {3ull * H * H * 2, 3ull * H * 2, (uint64_t)H * H * 2, H * 2,
				   4ull * H * H * 2, 4ull * H * 2, 4ull * H * H * 2, H * 2};
		for (int k = 0; k < 8; k++)
			w[nw++] = t_alloc(t, per[k], 0);
	}
	w[nw++] = t_alloc(t, H * 2, 0);

	while (t->n < EVENTS) {
		uint64_t b = pick(&rng, 1, 32), p = pick(&rng, 16, 1024), gen = pick(&rng, 8, 48);

		if (b * p > 8192)
			p = 8192 / b;
		uint32_t k[L], v[L], ids = t_alloc(t, b * p * 8, 1);
		uint32_t x = t_alloc(t, b * p * H * 2, 1);

		for (int l = 0; l < L; l++) { /* prefill */
			uint32_t qkv = t_alloc(t, b * p * 3 * H * 2, 1);
			k[l] = t_alloc(t, b * p * H * 2, 1);
			v[l] = t_alloc(t, b * p * H * 2, 1);
			uint32_t sc = t_alloc(t, b * NH * p * p * 2, 1);
			t_free(t, qkv);
			uint32_t ao = t_alloc(t, b * p * H * 2, 1);
			t_free(t, sc);
			uint32_t h = t_alloc(t, b * p * 4 * H * 2, 1), y = t_alloc(t, b * p * H * 2, 1);
			t_free(t, h);
			t_free(t, ao);
			t_free(t, x);
			x = y;
		}
		uint32_t logits = t_alloc(t, b * V * 4, 1);
		t_free(t, x);
		t_free(t, ids);
		uint32_t next = t_alloc(t, b * 8, 0);
		t_free(t, logits);
		for (uint64_t i = 1; i <= gen; i++) {
			uint64_t len = p + i;
			uint32_t y = t_alloc(t, b * H * 2, 0);

			for (int l = 0; l < L; l++) {
				uint32_t q = t_alloc(t, b * 3 * H * 2, 0);
				uint32_t k2 = t_alloc(t, b * len * H * 2, 0);
				t_free(t, k[l]);
				uint32_t v2 = t_alloc(t, b * len * H * 2, 0);
				t_free(t, v[l]);
				k[l] = k2;
				v[l] = v2;
				uint32_t sc = t_alloc(t, b * NH * len * 4, 0);
				t_free(t, q);
				uint32_t h = t_alloc(t, b * 4 * H * 2, 0);
				t_free(t, sc);
				t_free(t, h);
			}
			uint32_t lg = t_alloc(t, b * V * 4, 0), pr = t_alloc(t, b * V * 4, 0);
			t_free(t, lg);
			t_free(t, y);
			t_free(t, next);
			next = t_alloc(t, b * 8, 0);
			t_free(t, pr);
		}
		t_free(t, next);
		for (int l = 0; l < L; l++) {
			t_free(t, k[l]);
			t_free(t, v[l]);
		}
	}
	for (size_t i = 0; i < nw; i++)
		t_free(t, w[i]);
}

/* Serving several models in turn: each one's weights loaded as many
 * tensors on a loader stream, a few inference steps of varying batch,
 * everything freed, and every other time the cache emptied, as programs
 * that switch models do. */
void gen_switching(struct trace *t)
{
	static const struct {
		int layers;
		uint64_t hidden, vocab;
	} models[] = {{12, 768, 30522}, {6, 1024, 50257}, {8, 1536, 32000}, {3, 2560, 32000}};
	static const int order[] = {0, 1, 2, 3, 2, 0, 3, 1, 0, 2};
	uint64_t rng = 0x7377697463686e67ull;
	uint32_t *w = NULL;

	t->name = "switching";
	for (size_t k = 0; k < sizeof order / sizeof *order; k++) {
		int layers = models[order[k]].layers;
		uint64_t h = models[order[k]].hidden, vocab = models[order[k]].vocab;
		size_t nw = 0;

		w = must(realloc(w, (size_t)(12 * layers + 3) * sizeof *w));
		w[nw++] = t_alloc(t, vocab * h * 2, 1);
		w[nw++] = t_alloc(t, 512 * h * 2, 1);
		for (int l = 0; l < layers; l++) {
			uint64_t per[12] = {h * 2, h * 2, 3 * h * h * 2, 3 * h * 2, h * h * 2, h * 2,
					    h * 2, h * 2, 4 * h * h * 2, 4 * h * 2, 4 * h * h * 2, h * 2};
			for (int i = 0; i < 12; i++)
				w[nw++] = t_alloc(t, per[i], 1);
		}
		w[nw++] = t_alloc(t, h * 2, 1);
		for (int step = 0; step < 3; step++) {
			uint64_t b = pick(&rng, 1, 48), s = pick(&rng, 32, 384), tok = b * s;
			uint32_t x = t_alloc(t, tok * h * 2, 0);

			for (int l = 0; l < layers; l++) {
				uint32_t qkv = t_alloc(t, tok * 3 * h * 2, 0);
				uint32_t sc = t_alloc(t, b * 16 * s * s * 2, 0);
				uint32_t ao = t_alloc(t, tok * h * 2, 0);
				t_free(t, sc);
				t_free(t, qkv);
				uint32_t m = t_alloc(t, tok * 4 * h * 2, 0), y = t_alloc(t, tok * h * 2, 0);
				t_free(t, m);
				t_free(t, ao);
				t_free(t, x);
				x = y;
			}
			uint32_t logits = t_alloc(t, b * vocab * 4, 0);
			t_free(t, x);
			t_free(t, logits);
		}
		for (size_t i = 0; i < nw; i++)
			t_free(t, w[i]);
		if (k % 2 == 1)
			t_empty_cache(t);
	}
	free(w);
}
