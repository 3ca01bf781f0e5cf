/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-info.c - `devcache info`: the backends found, why any is unavailable, and the devices. */
#include "tool.h"

#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Names in the first column, what follows them from this column on. */
#define INDENT 13

static const struct {
	uint64_t bit;
	const char *name;
} cap_names[] = {
	{DEVCACHE_CAP_VMM, "vmm"},
	{DEVCACHE_CAP_IPC, "ipc"},
	{DEVCACHE_CAP_HOST_MEMORY, "host-memory"},
	{DEVCACHE_CAP_ASYNC_COPY, "async-copy"},
};

static void help(void)
{
	printf(_("Usage: devcache info [--json]\n"));
	fputs(_("List the backends libdevcache found, why any of them is unavailable, and\n"
		"the devices of those that loaded.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("  -j, --json                   print a JSON object instead\n"), stdout);
	tool_print_common_options();
}

static const char *status_text(enum devcache_backend_status status)
{
	switch (status) {
	case DEVCACHE_BACKEND_LOADED:
		return _("loaded");
	case DEVCACHE_BACKEND_UNAVAILABLE:
		return _("unavailable");
	case DEVCACHE_BACKEND_EXCLUDED:
		return _("excluded");
	default:
		return _("not found");
	}
}

/* For JSON: the same, untranslated. */
static const char *status_word(enum devcache_backend_status status)
{
	switch (status) {
	case DEVCACHE_BACKEND_LOADED:
		return "loaded";
	case DEVCACHE_BACKEND_UNAVAILABLE:
		return "unavailable";
	case DEVCACHE_BACKEND_EXCLUDED:
		return "excluded";
	default:
		return "not found";
	}
}

static void format_caps(uint64_t caps, char *buf, size_t size)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof cap_names / sizeof *cap_names; i++)
		if (caps & cap_names[i].bit && n < size)
			n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? " " : "",
					      cap_names[i].name);
	if (!n)
		snprintf(buf, size, "-");
}

/* "  NAME       text", the text wrapped under itself. */
static void print_row(const char *name, const char *text)
{
	size_t w = 2 + tool_width(name);

	printf("  %s", name);
	if (w < INDENT)
		printf("%*s", (int)(INDENT - w), ""), w = INDENT;
	else
		putchar(' '), w++;
	tool_wrap(stdout, w, INDENT, text);
}

/* The folders of the path that are not there; whether there was one. */
static bool print_missing(const char *path)
{
	char *copy = strdup(path), *save = NULL, *line;
	bool any = false;

	for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir;
	     dir = strtok_r(NULL, ":", &save)) {
		struct stat st;

		if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
			continue;
		if (asprintf(&line, _("(%s: no such directory)"), tool_shown(dir)) >= 0) {
			printf("  ");
			tool_wrap(stdout, 2, 3, line);
			free(line);
		}
		any = true;
	}
	free(copy);
	return any;
}

static void print_backends(devcache_ctx_t *ctx)
{
	size_t n = devcache_backend_count(ctx);
	char path[4096], *line;

	if (devcache_config_get(ctx, "backend_path", path, sizeof path, NULL))
		path[0] = '\0';
	if (asprintf(&line, _("Backends (modules from %s):"), tool_shown(path)) >= 0) {
		tool_wrap(stdout, 0, 2, line);
		free(line);
	}
	for (size_t i = 0; i < n; i++) {
		devcache_backend_info_t b;
		char devices[64] = "";

		if (devcache_backend_info(ctx, i, &b))
			continue;
		if (b.status == DEVCACHE_BACKEND_LOADED)
			snprintf(devices, sizeof devices, P_(", %u device", ", %u devices", b.device_count),
				 b.device_count);
		if (asprintf(&line, "%s%s%s%s", status_text(b.status), devices, *b.reason ? ": " : "",
			     tool_shown(b.reason)) >= 0) {
			print_row(tool_shown(b.name), line);
			free(line);
		}
		if (strcmp(b.path, "built-in") != 0 && *b.path)
			print_row("", tool_shown(b.path));
	}
	bool missing = print_missing(path);

	if (n == 1 && !missing)
		printf(_("  (no backend module found)\n"));
}

static int print_devices(devcache_ctx_t *ctx)
{
	int status = EXIT_OK;

	printf(_("Devices:\n"));
	for (size_t i = 0; i < devcache_device_count(ctx); i++) {
		devcache_device_t *dev;
		devcache_device_info_t info;
		char total[32], free_mem[32], caps[128], *line;

		if (devcache_device_at(ctx, i, &dev) || devcache_device_info(dev, &info)) {
			tool_error("%s", devcache_last_error());
			status = EXIT_RUNTIME;
			continue;
		}
		format_bytes(info.total_memory, total, sizeof total);
		format_bytes(info.free_memory, free_mem, sizeof free_mem);
		format_caps(info.caps, caps, sizeof caps);
		/* The driver's words, shown as a file's would be. */
		print_row(tool_shown(info.id), tool_shown(info.name));
		if (*info.pci_bus_id &&
		    asprintf(&line, "%s %s", _("PCI bus:"), tool_shown(info.pci_bus_id)) >= 0)
			print_row("", line), free(line);
		if (asprintf(&line, _("memory: %s free of %s; capabilities: %s"), free_mem, total,
			     caps) >= 0)
			print_row("", line), free(line);
		/* Only where the device has a limit below its memory (Level Zero). */
		if (info.max_alloc_size && info.max_alloc_size < info.total_memory) {
			char limit[32];

			format_bytes(info.max_alloc_size, limit, sizeof limit);
			if (asprintf(&line, _("largest single allocation: %s"), limit) >= 0)
				print_row("", line), free(line);
		}
	}
	return status;
}

static struct json_object *backends_json(devcache_ctx_t *ctx)
{
	struct json_object *all = json_object_new_array();

	for (size_t i = 0; all && i < devcache_backend_count(ctx); i++) {
		devcache_backend_info_t b;
		struct json_object *o;

		if (devcache_backend_info(ctx, i, &b))
			continue;
		if (!(o = json_object_new_object())) {
			json_object_put(all);
			return NULL;
		}
		json_object_object_add(o, "name", json_object_new_string(b.name));
		json_object_object_add(o, "status", json_object_new_string(status_word(b.status)));
		json_object_object_add(o, "devices", json_object_new_uint64(b.device_count));
		json_object_object_add(o, "reason", json_object_new_string(b.reason));
		json_object_object_add(o, "path", json_object_new_string(b.path));
		json_object_array_add(all, o);
	}
	return all;
}

static struct json_object *devices_json(devcache_ctx_t *ctx)
{
	struct json_object *all = json_object_new_array();

	for (size_t i = 0; all && i < devcache_device_count(ctx); i++) {
		devcache_device_t *dev;
		devcache_device_info_t info;
		struct json_object *o, *caps;

		if (devcache_device_at(ctx, i, &dev) || devcache_device_info(dev, &info))
			continue;
		o = json_object_new_object();
		caps = json_object_new_array();
		if (!o || !caps) {
			json_object_put(o);
			json_object_put(caps);
			json_object_put(all);
			return NULL;
		}
		for (size_t c = 0; c < sizeof cap_names / sizeof *cap_names; c++)
			if (info.caps & cap_names[c].bit)
				json_object_array_add(caps, json_object_new_string(cap_names[c].name));
		json_object_object_add(o, "id", json_object_new_string(info.id));
		json_object_object_add(o, "name", json_object_new_string(info.name));
		json_object_object_add(o, "pci_bus_id", json_object_new_string(info.pci_bus_id));
		json_object_object_add(o, "total_memory", json_object_new_uint64(info.total_memory));
		json_object_object_add(o, "free_memory", json_object_new_uint64(info.free_memory));
		json_object_object_add(o, "max_alloc_size",
				       json_object_new_uint64(info.max_alloc_size));
		json_object_object_add(o, "capabilities", caps);
		devcache_cache_device_stats_t cs;
		if (devcache_cache_device_stats(ctx, dev, &cs) == 0)
			json_object_object_add(o, "model_cache_budget", json_object_new_uint64(cs.budget));
		json_object_array_add(all, o);
	}
	return all;
}

static int print_json(devcache_ctx_t *ctx)
{
	struct json_object *doc = json_object_new_object(), *backends = backends_json(ctx),
			   *devices = devices_json(ctx);
	char path[4096];

	if (!doc || !backends || !devices) {
		json_object_put(doc);
		json_object_put(backends);
		json_object_put(devices);
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	if (devcache_config_get(ctx, "backend_path", path, sizeof path, NULL))
		path[0] = '\0';
	json_object_object_add(doc, "version", json_object_new_string(devcache_version_string()));
	json_object_object_add(doc, "backend_path", json_object_new_string(path));
	json_object_object_add(doc, "backends", backends);
	json_object_object_add(doc, "devices", devices);
	puts(json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PRETTY |
						 JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(doc);
	return EXIT_OK;
}

int cmd_info(struct tool *t, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		TOOL_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	devcache_ctx_t *ctx;
	bool json = false;
	int c, status;

	while ((c = getopt_long(argc, argv, "j" TOOL_SHORTOPTS, longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'h':
			help();
			return EXIT_OK;
		default:
			if ((status = tool_common_option(t, c, optarg)) >= 0)
				return status;
		}
	}
	if ((status = tool_no_operands(argc, argv)))
		return status;
	if ((status = tool_open(t, &ctx)))
		return status;
	if (json) {
		status = print_json(ctx);
	} else {
		printf("libdevcache %s\n", devcache_version_string());
		print_backends(ctx);
		status = print_devices(ctx);
	}
	devcache_close(ctx);
	return status;
}
