/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench.c - benchmark: loading generated safetensors models (zero-copy on the host, staged onto a device) against cat and a naive loader, a sharded set against one file, a partial load's RSS, and RSS while switching models. */
/*
 * The program's files: the shared core, then one a section of the report
 * (bench/README says what each figure means).
 *
 *   loadbench.c          the options, the model files measured, and main():
 *                        which figures run, the zero-copy target, the exit status
 *   loadbench.h          what the files share: the layouts, models and sets,
 *                        a figure's runs, each section's results
 *   loadbench-measure.c  the measurement core: peak RSS (VmHWM or sampled),
 *                        contexts and loads, the timed loaders (cat, a naive
 *                        read(), zero-copy, staged), medians and the report's lines
 *   loadbench-models.c   the model files: generated once with the tests' model
 *                        writer and reused, a single file or 4 shards and an
 *                        index; how much of each the page cache holds
 *   loadbench-size.c     one file (1G, 4G): every loader against cat
 *   loadbench-sharded.c  the 4G model as a sharded set against the single file
 *   loadbench-partial.c  the 4G model partially loaded, half of it fitting
 *   loadbench-switch.c   two models alternated under a RAM budget that fits one
 *   loadbench-manager.c  a model manager's loop: make_room, working memory, offload
 *   loadbench-sweep.c    -S: one device's figures for each staging_buffer_size
 *   loadbench-engine.c   the 1G model read into the caller's buffer, against the cache
 */
#include <config.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loadbench.h"

/* The single files (-s 1G, -s 4G). */
static const struct layout sizes[] = {
	{ "1G", "model-1g.safetensors", "TinyLlama-like", 2048, 5632, 512, 9, 32000, 1 },
	{ "4G", "model-4g.safetensors", "Llama-3-8B-like", 4096, 14336, 1024, 5, 128256, 4 },
};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

/* The two models alternated by the switching figures: 508 MiB each. */
static const struct layout switch_models[] = {
	{ "A", "switch-a.safetensors", "TinyLlama-like", 2048, 5632, 512, 3, 32000, 11 },
	{ "B", "switch-b.safetensors", "TinyLlama-like", 2048, 5632, 512, 3, 32000, 12 },
};

/* The sharded and partial figures use the 4G layout (sizes[SET_SIZE]). */
#define SET_SIZE 1

/* The run's settings (loadbench.h). */
const char *dir = ".", *module_dir;
const char *extra_options; /* -o: for every context, to compare settings */
int reps = 3;
int n_switches = 50;
const char *sweep_device; /* -S */
bool quick;               /* -q */
static bool want[N_SIZES] = { true, true };
static bool want_sharded = true, want_partial = true, want_manager = true, want_engine = true;

/* ---- main --------------------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: loadbench [-d DIR] [-m MODULEDIR] [-o OPTIONS] [-r REPS] [-n SWITCHES]\n"
		   "                 [-s 1G|4G|sharded|partial|manager|engine]...\n"
		   "       loadbench -S DEVICE [-q] [-d DIR] [-o OPTIONS] [-r REPS]\n"
		   "  Generates Llama-like BF16 safetensors files in DIR (reused when present)\n"
		   "  and times loading them: cat, a naive read() loader, devcache's zero-copy\n"
		   "  host load and its staging path onto the bench device; the 4G model as 4\n"
		   "  shards and an index against the single file; the 4G model loaded\n"
		   "  partially onto the bench device; a model manager's loop over three\n"
		   "  models; then alternates two models under a RAM budget that fits one;\n"
		   "  and the 1G model read into the caller's buffer on the bench device\n"
		   "  (devcache_model_file_read_tensors) against the cache's load and a\n"
		   "  naive read() + copy per tensor.\n"
		   "  -d DIR        where the model files are (default .)\n"
		   "  -m MODULEDIR  where benchdev.so is (default DIR/modules/.libs)\n"
		   "  -o OPTIONS    tunables (\"key:value,...\") for every context, to compare\n"
		   "                (the targets assume the defaults)\n"
		   "  -r REPS       runs per figure, the median time reported (default 3)\n"
		   "  -n SWITCHES   model switches (default 50; 0: no switching figures)\n"
		   "  -s GROUP      only these figures (repeatable; default all): a file size\n"
		   "                (1G, 4G), sharded (4G as a set), partial (4G, half fits),\n"
		   "                manager (make_room, working memory and offload) or\n"
		   "                engine (1G read into the caller's buffer)\n"
		   "  -S DEVICE     instead: the 1G model staged onto DEVICE (reached through\n"
		   "                -o's options) with staging_buffer_size 1, 4, 16 and 64 MiB,\n"
		   "                against cat and a pinned host-to-device copy\n"
		   "  -q            with -S: a small model, one run a figure (a quick check)\n");
}

static void parse_args(int argc, char **argv)
{
	static char mdir[4200];
	bool sized = false, reps_set = false;
	int opt;

	while ((opt = getopt(argc, argv, "d:m:o:r:n:s:S:qh")) != -1) {
		switch (opt) {
		case 'o': extra_options = *optarg ? optarg : NULL; break;
		case 'd': dir = optarg; break;
		case 'm': module_dir = optarg; break;
		case 'r': reps = atoi(optarg); reps_set = true; break;
		case 'n': n_switches = atoi(optarg); break;
		case 'S': sweep_device = optarg; break;
		case 'q': quick = true; break;
		case 's': {
			bool known = false;

			if (!sized) {
				memset(want, 0, sizeof want);
				want_sharded = want_partial = want_manager = want_engine = false;
			}
			sized = true;
			for (size_t i = 0; i < N_SIZES; i++)
				if (strcmp(optarg, sizes[i].label) == 0)
					want[i] = known = true;
			if (strcmp(optarg, "sharded") == 0)
				want_sharded = known = true;
			if (strcmp(optarg, "partial") == 0)
				want_partial = known = true;
			if (strcmp(optarg, "manager") == 0)
				want_manager = known = true;
			if (strcmp(optarg, "engine") == 0)
				want_engine = known = true;
			if (!known) {
				fprintf(stderr, "loadbench: -s %s: not a group of figures\n", optarg);
				usage(stderr);
				exit(2);
			}
			break;
		}
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (quick && !reps_set)
		reps = 1;
	if (optind != argc || reps < 1 || reps > MAX_REPS || n_switches < 0 ||
	    (quick && !sweep_device)) {
		usage(stderr);
		exit(2);
	}
	if (!module_dir) {
		snprintf(mdir, sizeof mdir, "%s/modules/.libs", dir);
		module_dir = mdir;
	}
}

int main(int argc, char **argv)
{
	struct model files[N_SIZES], sw[2];
	struct size_result res[N_SIZES];
	static struct set set;
	static struct sharded_result sharded;
	static struct partial_result partial;
	static struct engine_result engine;
	bool need_set_size;
	uint64_t ring;

	parse_args(argc, argv);
	/* After the options: -s 1G alone must not write the 4G model. */
	need_set_size = want_sharded || want_partial;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (sweep_device)
		return staging_sweep(&sizes[0]);
	use_hwm = hwm_reset();
	printf("== Model loading: generated safetensors files, warm page cache\n");
	printf("GB/s: file bytes / time (10^9 bytes per second); peak RSS: %s\n",
	       use_hwm ? "VmHWM, reset through /proc/self/clear_refs before each figure"
		       : "VmRSS sampled every 1 ms (clear_refs refused)");
	if (extra_options)
		printf("tunables:   %s (-o; the targets assume the defaults)\n", extra_options);
	printf("benchdev:0: the bench device, bench/modules/benchdev.c: device memory is "
	       "mmap()ed host memory, copies are memcpy\n");
	ring = ring_bytes();
	printf("\n");
	for (size_t i = 0; i < N_SIZES; i++)
		if (want[i] || (i == SET_SIZE && need_set_size) || (i == 0 && want_engine))
			prepare(&files[i], &sizes[i]);
	if (want_sharded && files[SET_SIZE].ready)
		prepare_set(&set, &files[SET_SIZE]);
	else if (want_sharded)
		snprintf(set.why, sizeof set.why, "%s", files[SET_SIZE].why);
	for (size_t i = 0; i < 2 && n_switches; i++)
		prepare(&sw[i], &switch_models[i]);
	for (size_t i = 0; i < N_SIZES; i++)
		if (want[i])
			measure_size(&files[i], &res[i]);
	if (want_sharded)
		measure_sharded(&files[SET_SIZE], &set, &sharded);
	if (want_partial)
		measure_partial(&files[SET_SIZE], &partial);
	if (want_engine)
		measure_engine(&files[0], &engine);

	printf("\n");
	bool zc_ok = want[1] && res[1].measured;
	if (zc_ok) {
		double t4 = median(&res[1].zc);

		print_target("load/zero-copy-4G", t4 < 0.010 ? "PASS" : "MISS",
			     "zero-copy host load of 4 GiB %.3f ms (target < 10 ms)", t4 * 1e3);
	} else {
		print_target("load/zero-copy-4G", "SKIP", "%s",
			     want[1] ? res[1].why : "the 4G file was not asked for (-s)");
	}
	if (zc_ok && want[0] && res[0].measured)
		printf("(info) zero-copy load: 1G %.3f ms, 4G %.3f ms: %.2fx for 4x the bytes\n",
		       median(&res[0].zc) * 1e3, median(&res[1].zc) * 1e3,
		       median(&res[1].zc) / median(&res[0].zc));
	for (size_t i = 0; i < N_SIZES; i++)
		if (want[i])
			size_targets(&files[i], &res[i], ring);
	if (want_sharded)
		sharded_targets(&files[SET_SIZE], &sharded);
	if (want_partial)
		partial_targets(&files[SET_SIZE], &partial, ring);
	if (want_manager)
		manager();
	else
		print_target("load/manager-vram", "SKIP", "not asked for (-s)");
	if (want_engine)
		engine_targets(&files[0], &engine, ring);
	if (n_switches) {
		switching(&sw[0], &sw[1]);
	} else {
		print_target("load/switch-rss [mmap:false]", "SKIP", "not asked for (-n 0)");
		print_target("load/switch-rss [mmap:true]", "SKIP", "not asked for (-n 0)");
	}
	return load_failed ? 2 : missed ? 1 : 0;
}
