/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* test-model-folder.c - folders holding one model, diffusers pipelines and their components, and the NULL arguments of the set and pipeline calls. */
#include "tap.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <devcache.h>

#include "model-set-fixture.h"

/* ---- folders -------------------------------------------------------------------- */

static void a_folder_of_one_safetensors_file_opens_it(void **state)
{
	char folder[512], path[512];

	(void)state;
	make_dir(folder, sizeof folder, "one");
	file_in(path, sizeof path, folder, "model.safetensors");
	mw_safetensors(path, set3, COUNT(set3), 2, "{\"format\":\"pt\"}");
	file_in(path, sizeof path, folder, "config.json");
	mw_text(path, "{\"a\": 1}");
	file_in(path, sizeof path, folder, "README.md");
	mw_text(path, "# a model\n");
	devcache_model_file_t *mf = opened(folder);
	const char *p;
	uint64_t size;
	assert_int_equal(devcache_model_file_shard_count(mf), 1);
	assert_int_equal(devcache_model_file_shard(mf, 0, &p, &size), 0);
	file_in(path, sizeof path, folder, "model.safetensors");
	assert_string_equal(p, path);
	assert_int_equal(devcache_model_file_tensor_count(mf), COUNT(set3));
	expect_bytes_in_shards(mf, 2);
	devcache_model_file_close(mf);
	/* A trailing slash is the same folder. */
	char slash[520];
	snprintf(slash, sizeof slash, "%s/", folder);
	mf = opened(slash);
	assert_int_equal(devcache_model_file_tensor_count(mf), COUNT(set3));
	devcache_model_file_close(mf);
}

static void a_folder_of_an_index_and_its_shards_is_one_model(void **state)
{
	char folder[512], paths[3][512];
	const char *shards[3] = {paths[0], paths[1], paths[2]};

	(void)state;
	make_dir(folder, sizeof folder, "sharded");
	mw_sharded(folder, "model", set3, COUNT(set3), 3, 1, 0, NULL, 0);
	st_shards(paths, folder, "model", 3);
	devcache_model_file_t *mf = opened(folder);
	expect_order(mf, set3, COUNT(set3), 3);
	expect_shards(mf, shards, 3);
	expect_bytes_in_shards(mf, 1);
	devcache_model_file_close(mf);
}

static void a_folder_of_a_gguf_split_is_one_model(void **state)
{
	char folder[512], paths[3][512];
	const char *shards[3] = {paths[0], paths[1], paths[2]};

	(void)state;
	make_dir(folder, sizeof folder, "split");
	mw_gguf_split(folder, "llama", split3, COUNT(split3), 3, 5, 0, NULL, 0);
	gguf_shards(paths, folder, "llama", 3);
	devcache_model_file_t *mf = opened(folder);
	expect_order(mf, split3, COUNT(split3), 3);
	expect_shards(mf, shards, 3);
	expect_bytes_in_shards(mf, 5);
	devcache_model_file_close(mf);
}

static void a_folder_of_two_models_is_refused(void **state)
{
	static const struct mw_tensor one[] = {{"x", 10, 0}};
	char folder[512], path[512];

	(void)state;
	make_dir(folder, sizeof folder, "two");
	mw_sharded(folder, "model", set3, COUNT(set3), 3, 1, 0, NULL, 0);
	file_in(path, sizeof path, folder, "extra.gguf");
	mw_gguf(path, NULL, 0, one, 1, 1);
	refused(folder, DEVCACHE_EINVAL, folder, "holds 2 models", "extra.gguf",
		"model.safetensors.index.json", "name one", NULL);
	/* The shards are the index's, not models of their own. */
	assert_null(strstr(devcache_last_error(), "model-00001-of-00003"));
	/* A GGUF split counts once, by its first shard. */
	assert_int_equal(unlink(path), 0);
	mw_gguf_split(folder, "llama", split3, COUNT(split3), 3, 5, 0, NULL, 0);
	refused(folder, DEVCACHE_EINVAL, folder, "holds 2 models", "llama-00001-of-00003.gguf",
		"model.safetensors.index.json", NULL);
	assert_null(strstr(devcache_last_error(), "llama-00002"));
}

static void an_empty_folder_is_refused(void **state)
{
	char folder[512], path[512];

	(void)state;
	make_dir(folder, sizeof folder, "empty");
	refused(folder, DEVCACHE_ENOENT, folder, "holds no safetensors or GGUF model", NULL);
	/* Nor does one of other files. */
	file_in(path, sizeof path, folder, "config.json");
	mw_text(path, "{}");
	file_in(path, sizeof path, folder, "model.bin");
	mw_text(path, "pickle");
	refused(folder, DEVCACHE_ENOENT, folder, "holds no safetensors or GGUF model", NULL);
}

/* ---- diffusers pipelines --------------------------------------------------------- */

static const char model_index[] =
	"{\"_class_name\":\"StableDiffusionPipeline\",\"_diffusers_version\":\"0.30.0\","
	"\"unet\":[\"diffusers\",\"UNet2DConditionModel\"],"
	"\"vae\":[\"diffusers\",\"AutoencoderKL\"],"
	"\"scheduler\":[\"diffusers\",\"PNDMScheduler\"],"
	"\"text_encoder\":[\"transformers\",\"CLIPTextModel\"]}";

static const struct mw_tensor unet[] = {
	{"conv_in.weight", 5000, 0},   {"down.0.weight", 70000, 1}, {"mid.weight", 3, 1},
	{"up.0.weight", 100000, 2},    {"conv_out.weight", 77, 3},
};
static const struct mw_tensor vae[] = {{"encoder.weight", 4000, 0}, {"decoder.weight", 6000, 0}};
static const struct mw_tensor clip[] = {{"text_model.embeddings", 9000, 0}};

/* dir/pipe as diffusers saves a pipeline; its path in buf. */
static void make_pipeline(char *pipe, size_t size)
{
	char sub[600], path[700];

	make_dir(pipe, size, "pipe");
	file_in(path, sizeof path, pipe, "model_index.json");
	mw_text(path, model_index);
	file_in(sub, sizeof sub, pipe, "unet");
	assert_int_equal(mkdir(sub, 0755), 0);
	mw_sharded(sub, "diffusion_pytorch_model", unet, COUNT(unet), 4, 21, 0, NULL, 0);
	file_in(path, sizeof path, sub, "config.json");
	mw_text(path, "{\"_class_name\": \"UNet2DConditionModel\"}");
	file_in(sub, sizeof sub, pipe, "vae");
	assert_int_equal(mkdir(sub, 0755), 0);
	file_in(path, sizeof path, sub, "diffusion_pytorch_model.safetensors");
	mw_safetensors(path, vae, COUNT(vae), 22, NULL);
	file_in(sub, sizeof sub, pipe, "text_encoder");
	assert_int_equal(mkdir(sub, 0755), 0);
	file_in(path, sizeof path, sub, "model.safetensors");
	mw_safetensors(path, clip, COUNT(clip), 23, NULL);
	file_in(sub, sizeof sub, pipe, "scheduler");
	assert_int_equal(mkdir(sub, 0755), 0);
	file_in(path, sizeof path, sub, "scheduler_config.json");
	mw_text(path, "{\"_class_name\": \"PNDMScheduler\"}");
}

static void a_pipeline_folder_is_refused_naming_its_components(void **state)
{
	char pipe[512];
	devcache_model_t *m = (devcache_model_t *)1;

	(void)state;
	make_pipeline(pipe, sizeof pipe);
	refused(pipe, DEVCACHE_EINVAL, pipe,
		"a diffusers pipeline, not one model: load one of: unet, vae, text_encoder", NULL);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	assert_int_equal(devcache_model_load(ctx, pipe, mw_device(ctx, "host"), NULL, &m),
			 DEVCACHE_EINVAL);
	assert_null(m);
	assert_contains(devcache_last_error(), pipe);
	assert_contains(devcache_last_error(),
			"a diffusers pipeline, not one model: load one of: unet, vae, text_encoder");
	devcache_close(ctx);
}

/* A component named ".." or "a/b" would lead out of the pipeline's folder. */
static void a_pipeline_component_outside_its_folder_is_refused(void **state)
{
	static const char *const bad[] = {"..", ".", "unet/../..", "/etc"};
	char path[512], text[256];
	devcache_pipeline_t *pl;

	(void)state;
	path_of(path, sizeof path, "model_index.json");
	for (size_t i = 0; i < COUNT(bad); i++) {
		snprintf(text, sizeof text, "{\"%s\":[\"diffusers\",\"UNet2DConditionModel\"]}",
			 bad[i]);
		mw_text(path, text);
		assert_int_equal(devcache_pipeline_open(dir, &pl), DEVCACHE_EFORMAT);
		assert_null(pl);
		assert_contains(devcache_last_error(), "model_index.json: component '");
		assert_contains(devcache_last_error(), "is not the name of a folder in the pipeline's");
	}
}

static void a_pipeline_lists_its_components(void **state)
{
	static const struct {
		const char *name, *library, *class_name;
		size_t shards;
	} want[] = {
		{"unet", "diffusers", "UNet2DConditionModel", 4},
		{"vae", "diffusers", "AutoencoderKL", 1},
		{"scheduler", "diffusers", "PNDMScheduler", 0},
		{"text_encoder", "transformers", "CLIPTextModel", 1},
	};
	char pipe[512], path[700], sub[600];
	devcache_pipeline_t *pl;
	devcache_component_t comp;
	uint64_t sizes[4] = {0, 0, 0, 0};

	(void)state;
	make_pipeline(pipe, sizeof pipe);
	/* The weight files' sizes, as the disk has them. */
	file_in(sub, sizeof sub, pipe, "unet");
	for (unsigned k = 0; k < 4; k++) {
		shard_path(path, sizeof path, sub, "diffusion_pytorch_model", k, 4, "safetensors");
		sizes[0] += file_size(path);
	}
	snprintf(path, sizeof path, "%s/vae/diffusion_pytorch_model.safetensors", pipe);
	sizes[1] = file_size(path);
	snprintf(path, sizeof path, "%s/text_encoder/model.safetensors", pipe);
	sizes[3] = file_size(path);

	assert_int_equal(devcache_pipeline_open(pipe, &pl), 0);
	assert_int_equal(devcache_pipeline_component_count(pl), 4);
	for (size_t i = 0; i < 4; i++) {
		memset(&comp, 0xa5, sizeof comp);
		assert_int_equal(devcache_pipeline_component(pl, i, &comp), 0);
		assert_string_equal(comp.name, want[i].name);
		file_in(path, sizeof path, pipe, want[i].name);
		assert_string_equal(comp.path, path);
		assert_string_equal(comp.library, want[i].library);
		assert_string_equal(comp.class_name, want[i].class_name);
		assert_int_equal(comp.shards, want[i].shards);
		assert_int_equal(comp.size, sizes[i]);
	}
	assert_int_equal(devcache_pipeline_component(pl, 4, &comp), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "no component 4 (the pipeline has 4)");
	devcache_pipeline_close(pl);
	/* Not a pipeline: no model_index.json. */
	file_in(path, sizeof path, pipe, "vae");
	assert_int_equal(devcache_pipeline_open(path, &pl), DEVCACHE_ENOENT);
	assert_contains(devcache_last_error(), "vae/model_index.json: cannot open");
	/* A model_index.json that is not JSON. */
	file_in(path, sizeof path, pipe, "model_index.json");
	mw_text(path, "not json");
	assert_int_equal(devcache_pipeline_open(pipe, &pl), DEVCACHE_EFORMAT);
	assert_contains(devcache_last_error(), path);
	assert_contains(devcache_last_error(), "not a diffusers model_index.json");
}

static void a_pipeline_component_folder_loads_as_one_model(void **state)
{
	char pipe[512], sub[600];
	devcache_model_t *m;

	(void)state;
	make_pipeline(pipe, sizeof pipe);
	file_in(sub, sizeof sub, pipe, "unet");
	devcache_model_file_t *mf = opened(sub);
	expect_order(mf, unet, COUNT(unet), 4);
	assert_int_equal(devcache_model_file_shard_count(mf), 4);
	devcache_model_file_close(mf);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	assert_int_equal(devcache_model_load(ctx, sub, mw_device(ctx, "host"), NULL, &m), 0);
	mf = (devcache_model_file_t *)devcache_model_file(m);
	assert_int_equal(devcache_model_file_tensor_count(mf), COUNT(unet));
	for (size_t i = 0; i < COUNT(unet); i++) {
		devcache_tensor_info_t info;
		void *data;

		assert_int_equal(devcache_model_tensor_at(m, i, &info, &data), 0);
		mw_check(info.name, data, info.size, 21);
	}
	devcache_model_release(m);
	devcache_close(ctx);
}

/* ---- cycles ---------------------------------------------------------------------- */

static void link_in(const char *folder, const char *name, const char *target)
{
	char path[700];

	file_in(path, sizeof path, folder, name);
	assert_int_equal(symlink(target, path), 0);
}

/* Each component's weight file a link to the pipeline's folder: followed,
 * the pipeline would open itself inside itself, twice per level, without
 * end.  It is refused at once, naming the link and the folder it leads
 * back to (the alarm turns a hang into a failure). */
static void a_pipeline_that_links_back_into_itself_is_refused(void **state)
{
	char pipe[512], sub[600], want[1400];
	devcache_pipeline_t *pl = (devcache_pipeline_t *)1;
	devcache_model_t *m = (devcache_model_t *)1;

	(void)state;
	make_dir(pipe, sizeof pipe, "loop");
	file_in(sub, sizeof sub, pipe, "model_index.json");
	mw_text(sub, model_index);
	file_in(sub, sizeof sub, pipe, "unet");
	assert_int_equal(mkdir(sub, 0755), 0);
	link_in(sub, "a.safetensors", "..");
	file_in(sub, sizeof sub, pipe, "vae");
	assert_int_equal(mkdir(sub, 0755), 0);
	link_in(sub, "a.safetensors", "..");
	snprintf(want, sizeof want,
		 "%s/unet/a.safetensors: leads back to %s, a folder that holds it: a cycle", pipe,
		 pipe);
	alarm(10);
	assert_int_equal(devcache_pipeline_open(pipe, &pl), DEVCACHE_EFORMAT);
	assert_null(pl);
	assert_contains(devcache_last_error(), want);
	/* The same through the calls that resolve a folder. */
	refused(pipe, DEVCACHE_EFORMAT, want, NULL);
	/* The component alone: its file is a folder, its parent, not a model. */
	file_in(sub, sizeof sub, pipe, "unet");
	refused(sub, DEVCACHE_EINVAL, sub, "/a.safetensors: not a regular file", NULL);
	devcache_ctx_t *ctx = mw_open_ctx(NULL);
	assert_int_equal(devcache_model_load(ctx, pipe, mw_device(ctx, "host"), NULL, &m),
			 DEVCACHE_EFORMAT);
	assert_null(m);
	assert_contains(devcache_last_error(), want);
	devcache_close(ctx);
	/* A link to the component's own folder; a component folder that is
	 * the pipeline's own. */
	file_in(sub, sizeof sub, pipe, "unet");
	file_in(want, sizeof want, sub, "a.safetensors");
	assert_int_equal(unlink(want), 0);
	link_in(sub, "a.safetensors", ".");
	assert_int_equal(devcache_pipeline_open(pipe, &pl), DEVCACHE_EFORMAT);
	assert_contains(devcache_last_error(), "unet/a.safetensors: leads back to ");
	assert_contains(devcache_last_error(), "/unet, a folder that holds it: a cycle");
	file_in(sub, sizeof sub, pipe, "vae");
	assert_int_equal(unlink(want), 0);
	file_in(want, sizeof want, sub, "a.safetensors");
	assert_int_equal(unlink(want), 0);
	assert_int_equal(rmdir(sub), 0);
	link_in(pipe, "vae", ".");
	snprintf(want, sizeof want, "%s: leads back to %s, a folder that holds it: a cycle", sub,
		 pipe);
	assert_int_equal(devcache_pipeline_open(pipe, &pl), DEVCACHE_EFORMAT);
	assert_contains(devcache_last_error(), want);
	alarm(0);
}

/* Pipelines whose components link to the next pipeline, 30 deep: no
 * cycle, but listed inside one another they would be opened 2^30 times.
 * A pipeline inside a component is no weight file of it, and is not
 * opened (the alarm turns a hang into a failure). */
static void pipelines_inside_components_are_not_listed(void **state)
{
	char pipe[512], sub[600], target[64], name[16];
	devcache_pipeline_t *pl;
	devcache_component_t comp;

	(void)state;
	for (int i = 0; i < 30; i++) {
		snprintf(name, sizeof name, "p%d", i);
		make_dir(pipe, sizeof pipe, name);
		file_in(sub, sizeof sub, pipe, "model_index.json");
		mw_text(sub, model_index);
		snprintf(target, sizeof target, "../../p%d", i + 1);
		for (int k = 0; k < 2; k++) {
			file_in(sub, sizeof sub, pipe, k ? "vae" : "unet");
			assert_int_equal(mkdir(sub, 0755), 0);
			link_in(sub, "a.safetensors", target);
		}
	}
	path_of(pipe, sizeof pipe, "p0");
	alarm(10);
	assert_int_equal(devcache_pipeline_open(pipe, &pl), 0);
	alarm(0);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(devcache_pipeline_component(pl, i, &comp), 0);
		assert_int_equal(comp.shards, 0);
		assert_int_equal(comp.size, 0);
	}
	devcache_pipeline_close(pl);
	refused(pipe, DEVCACHE_EINVAL, pipe, "(no component has weights)", NULL);
}

/* A plain folder whose one model is a link to the folder or its parent:
 * a folder, not a model file, refused naming the link. */
static void a_folder_whose_model_is_a_folder_is_refused(void **state)
{
	char folder[512], want[1400];

	(void)state;
	make_dir(folder, sizeof folder, "self");
	link_in(folder, "model.safetensors", ".");
	snprintf(want, sizeof want,
		 "%s/model.safetensors: leads back to %s, a folder that holds it: a cycle", folder,
		 folder);
	alarm(10);
	refused(folder, DEVCACHE_EFORMAT, want, NULL);
	make_dir(folder, sizeof folder, "parent");
	link_in(folder, "model.gguf", "..");
	snprintf(want, sizeof want, "%s/model.gguf: not a regular file", folder);
	refused(folder, DEVCACHE_EINVAL, want, NULL);
	alarm(0);
}

/* Links to files elsewhere are what a Hugging Face cache holds: they open,
 * in a folder and in a pipeline's component. */
static void links_to_files_elsewhere_still_open(void **state)
{
	char pipe[512], sub[600], elsewhere[512], target[700];
	devcache_pipeline_t *pl;
	devcache_component_t comp;

	(void)state;
	make_dir(elsewhere, sizeof elsewhere, "blobs");
	file_in(target, sizeof target, elsewhere, "vae-blob");
	mw_safetensors(target, vae, COUNT(vae), 22, NULL);
	make_pipeline(pipe, sizeof pipe);
	file_in(sub, sizeof sub, pipe, "vae");
	file_in(elsewhere, sizeof elsewhere, sub, "diffusion_pytorch_model.safetensors");
	assert_int_equal(unlink(elsewhere), 0);
	link_in(sub, "diffusion_pytorch_model.safetensors", target);
	assert_int_equal(devcache_pipeline_open(pipe, &pl), 0);
	assert_int_equal(devcache_pipeline_component(pl, 1, &comp), 0);
	assert_string_equal(comp.name, "vae");
	assert_int_equal(comp.shards, 1);
	assert_int_equal(comp.size, file_size(target));
	devcache_pipeline_close(pl);
	devcache_model_file_t *mf = opened(sub);
	assert_int_equal(devcache_model_file_tensor_count(mf), COUNT(vae));
	devcache_model_file_close(mf);
}

/* ---- arguments -------------------------------------------------------------------- */

static void null_arguments_fail_cleanly(void **state)
{
	char idx[512];
	devcache_model_file_t *mf;
	devcache_pipeline_t *pl;
	devcache_component_t comp;
	const char *p;
	uint64_t size;

	(void)state;
	mw_sharded(dir, "model", set3, COUNT(set3), 3, 1, 0, idx, sizeof idx);
	assert_int_equal(devcache_model_file_open(NULL, &mf), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_open: NULL argument");
	assert_int_equal(devcache_model_file_open(idx, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_open: NULL argument");
	mf = opened(idx);
	assert_int_equal(devcache_model_file_shard_count(NULL), 0);
	assert_int_equal(devcache_model_file_shard(NULL, 0, &p, &size), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_shard: NULL argument");
	assert_int_equal(devcache_model_file_shard(mf, 0, NULL, &size), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_shard: NULL argument");
	assert_int_equal(devcache_model_file_shard(mf, 0, &p, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_model_file_shard: NULL argument");
	devcache_model_file_close(mf);
	assert_int_equal(devcache_pipeline_open(NULL, &pl), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_pipeline_open: NULL argument");
	assert_int_equal(devcache_pipeline_open(dir, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_pipeline_open: NULL argument");
	assert_int_equal(devcache_pipeline_component_count(NULL), 0);
	assert_int_equal(devcache_pipeline_component(NULL, 0, &comp), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_pipeline_component: NULL argument");
	char pipe[512];
	make_pipeline(pipe, sizeof pipe);
	assert_int_equal(devcache_pipeline_open(pipe, &pl), 0);
	assert_int_equal(devcache_pipeline_component(pl, 0, NULL), DEVCACHE_EINVAL);
	assert_contains(devcache_last_error(), "devcache_pipeline_component: NULL argument");
	devcache_pipeline_close(pl);
	devcache_pipeline_close(NULL);
	devcache_model_file_close(NULL);
}

#define T(f) TMPDIR_TEST(f)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(a_folder_of_one_safetensors_file_opens_it),
		T(a_folder_of_an_index_and_its_shards_is_one_model),
		T(a_folder_of_a_gguf_split_is_one_model),
		T(a_folder_of_two_models_is_refused),
		T(an_empty_folder_is_refused),
		T(a_pipeline_folder_is_refused_naming_its_components),
		T(a_pipeline_component_outside_its_folder_is_refused),
		T(a_pipeline_lists_its_components),
		T(a_pipeline_component_folder_loads_as_one_model),
		T(a_pipeline_that_links_back_into_itself_is_refused),
		T(pipelines_inside_components_are_not_listed),
		T(a_folder_whose_model_is_a_folder_is_refused),
		T(links_to_files_elsewhere_still_open),
		T(null_arguments_fail_cleanly),
	};

	return RUN_TAP(tests);
}
