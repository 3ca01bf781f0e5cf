/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* loadbench-manager.c - bench/loadbench's model manager figure: three models larger together than the budgets, driven with make_room, working memory and offload; peak RSS, peak device reserved and the driver's free memory at the end. */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "loadbench.h"
#include "model-writer-core.h"

#define MANAGER_VRAM (256ull << 20)    /* max_cache_vram */
#define MANAGER_RAM (192ull << 20)     /* max_cache_ram */
#define MANAGER_WORKING (32ull << 20)  /* each use's working memory */
#define MANAGER_SEGMENT (20ull << 20)  /* the largest segment the allocator rounds to below 1 GiB */
#define MANAGER_STEPS 30

static const uint64_t manager_mib[] = {96, 128, 160};

/* The three models, one tensor of 32 MiB after another, in the -d
 * directory: written once, reused while their size is right. */
static bool write_models(char paths[3][4200])
{
	for (int i = 0; i < 3; i++) {
		uint64_t bytes = manager_mib[i] << 20;
		size_t n = (size_t)(bytes / (32u << 20));
		struct mw_tensor *t = xcalloc(n, sizeof *t);
		char (*names)[32] = xcalloc(n, sizeof *names);
		const struct mw_opts o = {.seed = 70 + (unsigned)i, .flags = MW_FSYNC};
		struct mw_err err;
		struct stat st;

		snprintf(paths[i], sizeof paths[i], "%s/manager-%d.safetensors", dir, i);
		for (size_t k = 0; k < n; k++) {
			snprintf(names[k], sizeof names[k], "layer.%zu", k);
			t[k] = (struct mw_tensor){.name = names[k], .size = 32u << 20};
		}
		bool ok = stat(paths[i], &st) == 0 && (uint64_t)st.st_size > bytes &&
			  (uint64_t)st.st_size < bytes + 4096;
		if (!ok && mw_st_write(paths[i], t, n, MW_ALL_SHARDS, &o, &err)) {
			fprintf(stderr, "loadbench: %s: %s\n", paths[i], err.msg);
			free(t);
			free(names);
			return false;
		}
		free(t);
		free(names);
	}
	return true;
}

static uint64_t driver_free(devcache_device_t *dev)
{
	devcache_device_info_t info;

	return devcache_device_info(dev, &info) ? 0 : info.free_memory;
}

void manager(void)
{
	char paths[3][4200], opts[128];
	devcache_cache_device_stats_t ds;
	devcache_cache_stats_t cs;
	devcache_stats_t st;

	printf("\n-- A model manager: models of %llu, %llu and %llu MiB on benchdev:0, "
	       "max_cache_vram:%lluM, max_cache_ram:%lluM; %d steps, each make_room for the "
	       "next model and %llu MiB of working memory, load, lock with that working memory, "
	       "release, offload the one before\n",
	       (unsigned long long)manager_mib[0], (unsigned long long)manager_mib[1],
	       (unsigned long long)manager_mib[2], (unsigned long long)(MANAGER_VRAM >> 20),
	       (unsigned long long)(MANAGER_RAM >> 20), MANAGER_STEPS,
	       (unsigned long long)(MANAGER_WORKING >> 20));
	if (!write_models(paths)) {
		print_target("load/manager-vram", "SKIP", "the models could not be written");
		return;
	}
	snprintf(opts, sizeof opts, "max_cache_vram:%lluM,max_cache_ram:%lluM",
		 (unsigned long long)(MANAGER_VRAM >> 20), (unsigned long long)(MANAGER_RAM >> 20));
	devcache_ctx_t *ctx = open_ctx(opts);
	devcache_device_t *dev = device(ctx, "benchdev:0");
	uint64_t free0 = driver_free(dev), rss0 = status_bytes("VmRSS:");
	double t0 = now_seconds();

	devcache_reset_peak(dev);
	peak_start();
	for (int step = 0; step < MANAGER_STEPS; step++) {
		int k = step % 3;
		devcache_model_t *m = NULL;
		int err = devcache_cache_make_room(ctx, dev, (manager_mib[k] << 20) + MANAGER_WORKING,
						   NULL);

		if (!err)
			err = devcache_model_load(ctx, paths[k], dev, NULL, &m);
		if (err)
			bench_fail(paths[k], err);
		if ((err = devcache_model_lock(m, MANAGER_WORKING)))
			bench_fail(paths[k], err);
		devcache_model_release(m);
		devcache_model_release(m);
		err = devcache_cache_offload(ctx, paths[(k + 2) % 3], dev);
		if (err && err != DEVCACHE_ENOENT)
			bench_fail(paths[(k + 2) % 3], err);
	}
	uint64_t rss = peak_end();
	double secs = now_seconds() - t0;

	devcache_cache_device_stats(ctx, dev, &ds);
	devcache_cache_stats(ctx, &cs);
	devcache_stats(dev, &st);
	uint64_t reserved_peak = st.reserved_bytes[DEVCACHE_POOL_ALL].peak;
	size_t evicted = devcache_cache_evict_all(ctx);
	uint64_t free_end = driver_free(dev);

	devcache_close(ctx);
	printf("%d steps in %.2f s: %llu hits (%llu from RAM), %llu misses, %llu evictions, "
	       "%llu offloads, %zu models evicted at the end\n",
	       MANAGER_STEPS, secs, (unsigned long long)cs.hits,
	       (unsigned long long)cs.ram_copy_reloads, (unsigned long long)cs.misses,
	       (unsigned long long)cs.evictions, (unsigned long long)cs.offloads, evicted);
	printf("peak charged: %.1f MiB of max_cache_vram, %.1f MiB of max_cache_ram; peak "
	       "reserved on the device %.1f MiB; peak RSS %.1f MiB (%.1f MiB before the loop; "
	       "benchdev's device memory is host memory, which RSS counts)\n",
	       mib(ds.peak_used), mib(cs.ram_peak), mib(reserved_peak), mib(rss), mib(rss0));
	printf("driver free memory: %.1f MiB before, %.1f MiB after evict_all\n", mib(free0),
	       mib(free_end));
	print_target("load/manager-vram", reserved_peak <= MANAGER_VRAM + MANAGER_SEGMENT ? "PASS" : "MISS",
		     "peak device reserved %.1f MiB (target <= max_cache_vram + one segment, "
		     "%.0f MiB)", mib(reserved_peak), mib(MANAGER_VRAM + MANAGER_SEGMENT));
	/* On benchdev the device's memory is the process's too. */
	uint64_t rss_limit = rss0 + MANAGER_RAM + MANAGER_VRAM + MANAGER_SEGMENT + (64ull << 20);
	print_target("load/manager-rss", rss <= rss_limit ? "PASS" : "MISS",
		     "peak RSS %.1f MiB (target <= the RSS before + max_cache_ram + what the "
		     "device holds + 64 MiB, %.0f MiB)", mib(rss), mib(rss_limit));
	print_target("load/manager-free", free_end == free0 ? "PASS" : "MISS",
		     "driver free memory after evict_all %.1f MiB, before the loads %.1f MiB "
		     "(target: the same)", mib(free_end), mib(free0));
}
