/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-info.c - `devcache info`: the backends found, why any is unavailable, and the devices. */
#include "tool.h"

#include <stdio.h>
#include <string.h>

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

static void print_caps(uint64_t caps)
{
	static const struct {
		uint64_t bit;
		const char *name;
	} names[] = {
		{DEVCACHE_CAP_VMM, "vmm"},
		{DEVCACHE_CAP_IPC, "ipc"},
		{DEVCACHE_CAP_HOST_MEMORY, "host-memory"},
		{DEVCACHE_CAP_ASYNC_COPY, "async-copy"},
	};
	const char *sep = "";

	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (caps & names[i].bit) {
			printf("%s%s", sep, names[i].name);
			sep = " ";
		}
	if (!*sep)
		printf("-");
}

static void print_backends(devcache_ctx_t *ctx)
{
	size_t n = devcache_backend_count(ctx);
	char path[4096];

	if (devcache_config_get(ctx, "backend_path", path, sizeof path, NULL))
		path[0] = '\0';
	printf(_("Backends (modules from %s):\n"), path);
	for (size_t i = 0; i < n; i++) {
		devcache_backend_info_t b;

		if (devcache_backend_info(ctx, i, &b))
			continue;
		printf("  %-10s %s", b.name, status_text(b.status));
		if (b.status == DEVCACHE_BACKEND_LOADED)
			printf(_(", %u device(s)"), b.device_count);
		if (*b.reason)
			printf(": %s", b.reason);
		printf("\n");
		if (strcmp(b.path, "built-in") != 0 && *b.path)
			printf("  %-10s %s\n", "", b.path);
	}
	if (n == 1)
		printf(_("  (no backend module found)\n"));
}

int cmd_info(const struct tool *t, int argc, char **argv)
{
	devcache_ctx_t *ctx;
	int status;

	(void)argv;
	if (argc > 1) {
		tool_error(_("info takes no arguments"));
		return EXIT_USAGE;
	}
	if ((status = tool_open(t, &ctx)))
		return status;
	printf("libdevcache %s\n", devcache_version_string());
	print_backends(ctx);
	printf(_("Devices:\n"));
	for (size_t i = 0; i < devcache_device_count(ctx); i++) {
		devcache_device_t *dev;
		devcache_device_info_t info;
		char total[32], free_mem[32];

		if (devcache_device_at(ctx, i, &dev) || devcache_device_info(dev, &info)) {
			tool_error("%s", devcache_last_error());
			status = EXIT_RUNTIME;
			continue;
		}
		tool_format_bytes(info.total_memory, total, sizeof total);
		tool_format_bytes(info.free_memory, free_mem, sizeof free_mem);
		printf("  %-10s %s\n", info.id, info.name);
		if (*info.pci_bus_id)
			printf("  %-10s %s %s\n", "", _("PCI bus:"), info.pci_bus_id);
		printf("  %-10s ", "");
		printf(_("memory: %s free of %s; capabilities: "), free_mem, total);
		print_caps(info.caps);
		printf("\n");
	}
	devcache_close(ctx);
	return status;
}
