/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* gentrace.c - writes allocation traces (devcache-trace(5)) of a transformer training loop and of a decoder with a growing KV cache. */
#include <config.h>

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

/* The traces follow what PyTorch does for a GPT-style model, tensor by
 * tensor, with sizes as PyTorch would ask the allocator for them: training
 * under bf16 autocast with fp32 weights and AdamW (foreach), attention by a
 * fused (flash) kernel; decoding in bf16 the way Hugging Face's generate()
 * does, whose KV cache grows by torch.cat: a bigger tensor each token, a
 * copy, the old one freed.  Comment lines "# step N" and "# warmup-end"
 * mark where each step starts and where the warm-up ends; the replay
 * benchmark counts device allocations after that mark. */

static FILE *out;
static uint64_t next_id = 1;
static uint64_t live_bytes, peak_bytes;

static uint64_t A(uint64_t size)
{
	uint64_t id = next_id++;

	fprintf(out, "+ %llu %llu\n", (unsigned long long)id, (unsigned long long)size);
	live_bytes += size;
	if (live_bytes > peak_bytes)
		peak_bytes = live_bytes;
	return id;
}

/* Frees need the size only to keep the generator's own live count. */
static void F(uint64_t id, uint64_t size)
{
	fprintf(out, "- %llu\n", (unsigned long long)id);
	live_bytes -= size;
}

static void comment(const char *fmt, ...) DEVCACHE_PRINTF(1, 2);

static void comment(const char *fmt, ...)
{
	va_list ap;

	fputs("# ", out);
	va_start(ap, fmt);
	vfprintf(out, fmt, ap);
	va_end(ap);
	fputc('\n', out);
}

/* A tensor: its trace ID and size. */
struct t {
	uint64_t id, size;
};

static struct t T(uint64_t size)
{
	struct t x = { A(size), size };

	return x;
}

static void R(struct t *x)
{
	if (x->id)
		F(x->id, x->size);
	x->id = 0;
}

/* ---- (a) training ------------------------------------------------------------ */

struct model {
	uint64_t vocab, d, layers, heads, max_seq;
};

/* The parameters of one layer, in registration order: ln1 w b, qkv W b,
 * proj W b, ln2 w b, fc1 W b, fc2 W b. */
#define LAYER_PARAMS 12

static void layer_param_sizes(const struct model *m, uint64_t *n)
{
	uint64_t d = m->d;
	uint64_t v[LAYER_PARAMS] = { d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d,
				     4 * d * d, d };

	memcpy(n, v, sizeof v);
}

struct train_state {
	const struct model *m;
	size_t nparams;
	uint64_t *numel;  /* elements of each parameter */
	struct t *param, *grad, *exp_avg, *exp_avg_sq, *step;
};

/* One linear layer's weight as autocast sees it: a bf16 copy, made in the
 * forward pass and kept for the backward pass. */
struct layer_saved {
	struct t x_in, ln1_mean, ln1_rstd, ln1_bf16, w_qkv, qkv, attn_out, attn_lse, attn_seed,
		w_proj, drop1_mask, x_mid, ln2_mean, ln2_rstd, ln2_bf16, w_fc1, fc1, gelu, w_fc2,
		drop2_mask;
};

static void train_init(struct train_state *s, const struct model *m)
{
	uint64_t per[LAYER_PARAMS];
	size_t k = 0;

	s->m = m;
	s->nparams = 2 + m->layers * LAYER_PARAMS + 2;
	s->numel = calloc(s->nparams, sizeof *s->numel);
	s->param = calloc(s->nparams, sizeof *s->param);
	s->grad = calloc(s->nparams, sizeof *s->grad);
	s->exp_avg = calloc(s->nparams, sizeof *s->exp_avg);
	s->exp_avg_sq = calloc(s->nparams, sizeof *s->exp_avg_sq);
	s->step = calloc(s->nparams, sizeof *s->step);
	if (!s->numel || !s->param || !s->grad || !s->exp_avg || !s->exp_avg_sq || !s->step) {
		fprintf(stderr, "gentrace: out of memory\n");
		exit(2);
	}
	layer_param_sizes(m, per);
	s->numel[k++] = m->vocab * m->d;   /* token embedding, tied to the LM head */
	s->numel[k++] = m->max_seq * m->d; /* position embedding */
	for (uint64_t l = 0; l < m->layers; l++)
		for (int i = 0; i < LAYER_PARAMS; i++)
			s->numel[k++] = per[i];
	s->numel[k++] = m->d; /* final layer norm */
	s->numel[k++] = m->d;
	comment("parameters: model.to(device)");
	for (size_t i = 0; i < s->nparams; i++)
		s->param[i] = T(4 * s->numel[i]);
}

/* The gradient of parameter i: allocated by the first backward use after
 * zero_grad(set_to_none=True), accumulated in place after that. */
static void grad_of(struct train_state *s, size_t i)
{
	if (!s->grad[i].id)
		s->grad[i] = T(4 * s->numel[i]);
}

/* grad_of for a weight used in bf16: the bf16 gradient, then its fp32 cast. */
static void grad_of_bf16(struct train_state *s, size_t i)
{
	struct t g16 = T(2 * s->numel[i]);

	grad_of(s, i);
	R(&g16);
}

static size_t layer_param(const struct model *m, uint64_t l, int which)
{
	(void)m;
	return 2 + l * LAYER_PARAMS + (size_t)which;
}

static void train_step(struct train_state *s, uint64_t B, uint64_t S)
{
	const struct model *m = s->m;
	uint64_t d = m->d, V = m->vocab, h = m->heads, N = B * S;
	struct layer_saved *sv = calloc(m->layers, sizeof *sv);
	struct t ids, targets, tok, pos, x, drop0_mask, lnf_mean, lnf_rstd, lnf_bf16, w_head,
		logits, logits32, logp, loss, g, gx, tmp;

	if (!sv)
		exit(2);
	/* Inputs copied to the device. */
	ids = T(8 * N);
	targets = T(8 * N);

	/* ---- forward */
	tok = T(4 * N * d);
	pos = T(4 * S * d);
	x = T(4 * N * d);
	R(&tok);
	R(&pos);
	drop0_mask = T(N * d);
	tmp = T(4 * N * d);
	R(&x);
	x = tmp;
	for (uint64_t l = 0; l < m->layers; l++) {
		struct layer_saved *L = &sv[l];
		struct t ln;

		L->x_in = x; /* layer norm keeps its input for backward */
		ln = T(4 * N * d);
		L->ln1_mean = T(4 * N);
		L->ln1_rstd = T(4 * N);
		L->ln1_bf16 = T(2 * N * d);
		R(&ln);
		L->w_qkv = T(2 * 3 * d * d);
		L->qkv = T(2 * N * 3 * d);
		L->attn_out = T(2 * N * d);
		L->attn_lse = T(4 * B * h * S);
		L->attn_seed = T(16);
		L->w_proj = T(2 * d * d);
		tmp = T(2 * N * d); /* projection */
		L->drop1_mask = T(N * d);
		struct t drop = T(2 * N * d);
		R(&tmp);
		L->x_mid = T(4 * N * d); /* residual add, in fp32 */
		R(&drop);
		ln = T(4 * N * d);
		L->ln2_mean = T(4 * N);
		L->ln2_rstd = T(4 * N);
		L->ln2_bf16 = T(2 * N * d);
		R(&ln);
		L->w_fc1 = T(2 * 4 * d * d);
		L->fc1 = T(2 * N * 4 * d);
		L->gelu = T(2 * N * 4 * d);
		L->w_fc2 = T(2 * 4 * d * d);
		tmp = T(2 * N * d);
		L->drop2_mask = T(N * d);
		drop = T(2 * N * d);
		R(&tmp);
		x = T(4 * N * d);
		R(&drop);
	}
	struct t ln = T(4 * N * d);
	lnf_mean = T(4 * N);
	lnf_rstd = T(4 * N);
	lnf_bf16 = T(2 * N * d);
	R(&ln);
	w_head = T(2 * V * d);
	logits = T(2 * N * V);
	/* cross_entropy runs in fp32 under autocast */
	logits32 = T(4 * N * V);
	R(&logits);
	logp = T(4 * N * V);
	R(&logits32);
	loss = T(4);

	/* ---- backward */
	g = T(4); /* d loss / d loss */
	R(&loss);
	tmp = T(4 * N * V); /* nll backward */
	R(&g);
	g = T(4 * N * V); /* log_softmax backward */
	R(&tmp);
	R(&logp);
	R(&targets);
	tmp = T(2 * N * V); /* back to bf16 */
	R(&g);
	gx = T(2 * N * d); /* LM head: input gradient */
	grad_of_bf16(s, 0);
	R(&tmp);
	R(&w_head);
	R(&lnf_bf16);
	g = T(4 * N * d); /* final layer norm */
	R(&gx);
	grad_of(s, s->nparams - 2);
	grad_of(s, s->nparams - 1);
	R(&lnf_mean);
	R(&lnf_rstd);
	R(&x); /* the last layer's output, kept by the final layer norm */
	for (uint64_t l = m->layers; l-- > 0;) {
		struct layer_saved *L = &sv[l];
		struct t gb, gmid;

		/* residual: g flows to both branches; fc2 + dropout */
		gb = T(2 * N * d);
		R(&L->drop2_mask);
		tmp = T(2 * N * 4 * d); /* fc2 input gradient */
		grad_of_bf16(s, layer_param(m, l, 10));
		grad_of(s, layer_param(m, l, 11));
		R(&gb);
		R(&L->w_fc2);
		gb = T(2 * N * 4 * d); /* gelu backward */
		R(&tmp);
		R(&L->gelu);
		tmp = T(2 * N * d); /* fc1 input gradient */
		grad_of_bf16(s, layer_param(m, l, 8));
		grad_of(s, layer_param(m, l, 9));
		R(&gb);
		R(&L->fc1);
		R(&L->w_fc1);
		R(&L->ln2_bf16);
		gb = T(4 * N * d); /* layer norm 2 backward, fp32 */
		R(&tmp);
		grad_of(s, layer_param(m, l, 6));
		grad_of(s, layer_param(m, l, 7));
		R(&L->ln2_mean);
		R(&L->ln2_rstd);
		gmid = T(4 * N * d); /* sum at the residual */
		R(&gb);
		R(&g);
		R(&L->x_mid);
		/* attention block */
		gb = T(2 * N * d);
		R(&L->drop1_mask);
		tmp = T(2 * N * d); /* projection input gradient */
		grad_of_bf16(s, layer_param(m, l, 4));
		grad_of(s, layer_param(m, l, 5));
		R(&gb);
		R(&L->w_proj);
		gb = T(2 * N * 3 * d); /* flash attention backward: dq dk dv */
		struct t dsum = T(4 * B * h * S);
		R(&dsum);
		R(&tmp);
		R(&L->attn_out);
		R(&L->attn_lse);
		R(&L->attn_seed);
		R(&L->qkv);
		tmp = T(2 * N * d); /* qkv input gradient */
		grad_of_bf16(s, layer_param(m, l, 2));
		grad_of(s, layer_param(m, l, 3));
		R(&gb);
		R(&L->w_qkv);
		R(&L->ln1_bf16);
		gb = T(4 * N * d); /* layer norm 1 backward */
		R(&tmp);
		grad_of(s, layer_param(m, l, 0));
		grad_of(s, layer_param(m, l, 1));
		R(&L->ln1_mean);
		R(&L->ln1_rstd);
		g = T(4 * N * d);
		R(&gb);
		R(&gmid);
		R(&L->x_in);
	}
	/* dropout and embeddings */
	tmp = T(4 * N * d);
	R(&drop0_mask);
	R(&g);
	grad_of(s, 1);
	grad_of(s, 0); /* embedding backward: index_add into the tied gradient */
	R(&tmp);
	R(&ids);

	/* ---- optimizer.step(): AdamW, foreach */
	for (size_t i = 0; i < s->nparams; i++)
		if (!s->exp_avg[i].id) {
			s->step[i] = T(4);
			s->exp_avg[i] = T(4 * s->numel[i]);
			s->exp_avg_sq[i] = T(4 * s->numel[i]);
		}
	/* _foreach_sqrt(exp_avg_sq) and the division make one temporary list */
	struct t *tmps = calloc(s->nparams, sizeof *tmps);

	if (!tmps)
		exit(2);
	for (size_t i = 0; i < s->nparams; i++)
		tmps[i] = T(4 * s->numel[i]);
	for (size_t i = 0; i < s->nparams; i++)
		R(&tmps[i]);
	free(tmps);
	/* ---- optimizer.zero_grad(set_to_none=True) */
	for (size_t i = 0; i < s->nparams; i++)
		R(&s->grad[i]);
	free(sv);
}

static void train_fini(struct train_state *s)
{
	free(s->numel);
	free(s->param);
	free(s->grad);
	free(s->exp_avg);
	free(s->exp_avg_sq);
	free(s->step);
}

static const struct model gpt2_small = { 32000, 768, 12, 12, 1024 };

/* The same batch shape every step. */
static void gen_train_fixed(unsigned steps, unsigned warmup)
{
	struct train_state s;

	comment("transformer training, fixed shape: d=%llu layers=%llu vocab=%llu, batch 8 x 512",
		(unsigned long long)gpt2_small.d, (unsigned long long)gpt2_small.layers,
		(unsigned long long)gpt2_small.vocab);
	train_init(&s, &gpt2_small);
	for (unsigned i = 0; i < steps; i++) {
		if (i == warmup)
			comment("warmup-end");
		comment("step %u batch 8 seq 512", i + 1);
		train_step(&s, 8, 512);
	}
	train_fini(&s);
}

/* Batch size and padded sequence length drawn afresh every step, as a
 * data loader with dynamic padding gives them. */
static void gen_train_var(unsigned steps, unsigned warmup, uint64_t seed)
{
	struct train_state s;
	struct rng r;

	rng_seed(&r, seed);
	comment("transformer training, variable shapes: d=%llu layers=%llu vocab=%llu, "
		"batch 2..8, seq 64..512 (multiple of 8), seed %llu",
		(unsigned long long)gpt2_small.d, (unsigned long long)gpt2_small.layers,
		(unsigned long long)gpt2_small.vocab, (unsigned long long)seed);
	train_init(&s, &gpt2_small);
	for (unsigned i = 0; i < steps; i++) {
		uint64_t B = rng_range(&r, 2, 8), S = 8 * rng_range(&r, 8, 64);

		if (i == warmup)
			comment("warmup-end");
		comment("step %u batch %llu seq %llu", i + 1, (unsigned long long)B,
			(unsigned long long)S);
		train_step(&s, B, S);
	}
	train_fini(&s);
}

/* ---- (b) decoding with a growing KV cache --------------------------------- */

static const struct model decoder = { 32000, 1024, 16, 16, 4096 };

/* One forward pass over n new tokens of each of B sequences whose caches
 * hold len tokens: the caches grow by torch.cat. */
static void decode_forward(struct t *kc, struct t *vc, uint64_t B, uint64_t n, uint64_t len)
{
	const struct model *m = &decoder;
	uint64_t d = m->d, N = B * n;
	struct t x = T(2 * N * d), ln, qkv, att, o, r, f1, f2, tmp;

	for (uint64_t l = 0; l < m->layers; l++) {
		ln = T(2 * N * d);
		qkv = T(2 * N * 3 * d);
		R(&ln);
		/* cat(past, new) for keys and values: allocate, copy, free */
		tmp = T(2 * B * (len + n) * d);
		R(&kc[l]);
		kc[l] = tmp;
		tmp = T(2 * B * (len + n) * d);
		R(&vc[l]);
		vc[l] = tmp;
		att = T(2 * N * d);
		R(&qkv);
		o = T(2 * N * d);
		R(&att);
		r = T(2 * N * d);
		R(&o);
		R(&x);
		ln = T(2 * N * d);
		f1 = T(2 * N * 4 * d);
		R(&ln);
		tmp = T(2 * N * 4 * d); /* gelu */
		R(&f1);
		f2 = T(2 * N * d);
		R(&tmp);
		x = T(2 * N * d);
		R(&f2);
		R(&r);
	}
	ln = T(2 * N * d);
	R(&x);
	/* logits of the last position only, then fp32 for sampling */
	struct t logits = T(2 * B * m->vocab), l32 = T(4 * B * m->vocab);

	R(&logits);
	struct t probs = T(4 * B * m->vocab);
	R(&l32);
	struct t next = T(8 * B);
	R(&probs);
	R(&ln);
	R(&next);
}

static void gen_decode(unsigned requests, uint64_t seed)
{
	const struct model *m = &decoder;
	uint64_t per[LAYER_PARAMS];
	struct t *w = calloc(m->layers * LAYER_PARAMS + 3, sizeof *w);
	struct t *kc = calloc(m->layers, sizeof *kc), *vc = calloc(m->layers, sizeof *vc);
	struct rng r;
	size_t k = 0;

	if (!w || !kc || !vc)
		exit(2);
	rng_seed(&r, seed);
	comment("decoder, KV cache grown by torch.cat: d=%llu layers=%llu vocab=%llu, bf16; "
		"batch 1..4, prompt 16..1024, 16..512 new tokens, seed %llu",
		(unsigned long long)m->d, (unsigned long long)m->layers,
		(unsigned long long)m->vocab, (unsigned long long)seed);
	layer_param_sizes(m, per);
	w[k++] = T(2 * m->vocab * m->d);
	w[k++] = T(2 * m->max_seq * m->d);
	for (uint64_t l = 0; l < m->layers; l++)
		for (int i = 0; i < LAYER_PARAMS; i++)
			w[k++] = T(2 * per[i]);
	w[k++] = T(2 * m->d);
	for (unsigned q = 0; q < requests; q++) {
		uint64_t B = rng_range(&r, 1, 4), P = rng_range(&r, 16, 1024),
			 G = rng_range(&r, 16, 512);

		if (q == 1)
			comment("warmup-end");
		comment("step %u request batch %llu prompt %llu new %llu", q + 1,
			(unsigned long long)B, (unsigned long long)P, (unsigned long long)G);
		struct t ids = T(8 * B * P), mask = T(8 * B * P);

		decode_forward(kc, vc, B, P, 0);
		for (uint64_t i = 0; i + 1 < G; i++) {
			/* attention mask and ids grow by cat too */
			struct t nid = T(8 * B * (P + i + 1)), nmask = T(8 * B * (P + i + 1));

			R(&ids);
			R(&mask);
			ids = nid;
			mask = nmask;
			decode_forward(kc, vc, B, 1, P + i);
		}
		for (uint64_t l = 0; l < m->layers; l++) {
			R(&kc[l]);
			R(&vc[l]);
		}
		R(&ids);
		R(&mask);
	}
	free(w);
	free(kc);
	free(vc);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: gentrace [-s STEPS] [-S SEED] KIND FILE\n"
		   "  KIND: train-fixed (default 12 steps), train-var (default 40 steps),\n"
		   "        decode (default 8 requests)\n");
}

int main(int argc, char **argv)
{
	unsigned steps = 0;
	uint64_t seed = 1;
	int opt;

	while ((opt = getopt(argc, argv, "s:S:h")) != -1) {
		switch (opt) {
		case 's':
			steps = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'S':
			seed = strtoull(optarg, NULL, 10);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	out = fopen(argv[optind + 1], "w");
	if (!out) {
		fprintf(stderr, "gentrace: %s: %s\n", argv[optind + 1], strerror(errno));
		return 2;
	}
	fprintf(out, "# devcache benchmark trace (bench/gentrace %s)\n", argv[optind]);
	if (!strcmp(argv[optind], "train-fixed"))
		gen_train_fixed(steps ? steps : 12, 2);
	else if (!strcmp(argv[optind], "train-var"))
		gen_train_var(steps ? steps : 40, 8, seed);
	else if (!strcmp(argv[optind], "decode"))
		gen_decode(steps ? steps : 8, seed);
	else {
		usage(stderr);
		return 2;
	}
	fprintf(out, "# peak live bytes %llu\n", (unsigned long long)peak_bytes);
	if (fclose(out) != 0) {
		fprintf(stderr, "gentrace: %s: %s\n", argv[optind + 1], strerror(errno));
		return 2;
	}
	return 0;
}
