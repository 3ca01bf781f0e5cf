/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-config.c - `devcache config`: every tunable with its value and origin; --check FILE. */
#include "tool.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static void print_error(void *user, enum devcache_log_level level, const char *message)
{
	(void)user;
	if (level <= DEVCACHE_LOG_ERROR)
		tool_error("%s", message);
	else
		fprintf(stderr, "devcache: %s\n", message);
}

static int check_file(const char *path)
{
	int rc = devcache_config_check_file(path, print_error, NULL);

	if (rc)
		return tool_status(rc == DEVCACHE_EIO ? DEVCACHE_EIO : DEVCACHE_ECONFIG);
	printf(_("%s: valid\n"), path);
	return EXIT_OK;
}

static int print_table(const struct tool *t)
{
	size_t n, wname = 4, wvalue = 5;
	devcache_ctx_t *ctx;
	char value[4096], from[64];
	const char *origin;
	int status;

	if ((status = tool_open(t, &ctx)))
		return status;
	/* The core's tunables, then those of the loaded backend modules. */
	n = devcache_config_count(ctx);
	for (size_t i = 0; i < n; i++) {
		devcache_tunable_desc_t d;

		if (devcache_config_describe(ctx, i, &d) == 0 &&
		    devcache_config_get(ctx, d.name, value, sizeof value, NULL) == 0) {
			wname = strlen(d.name) > wname ? strlen(d.name) : wname;
			wvalue = strlen(value) > wvalue && strlen(value) <= 24 ? strlen(value) : wvalue;
		}
	}
	printf("%-*s  %-*s  %-16s %s\n", (int)wname, _("NAME"), (int)wvalue, _("VALUE"),
	       _("ORIGIN"), _("DESCRIPTION"));
	for (size_t i = 0; i < n; i++) {
		devcache_tunable_desc_t d;

		if (devcache_config_describe(ctx, i, &d) ||
		    devcache_config_get(ctx, d.name, value, sizeof value, &origin)) {
			tool_error("%s", devcache_last_error());
			status = EXIT_RUNTIME;
			continue;
		}
		from[0] = '\0';
		if (d.module)
			/* TRANSLATORS: after a tunable's summary: the module that declares it. */
			snprintf(from, sizeof from, _(" (%s module)"), d.module);
		printf("%-*s  %-*s  %-16s %s%s%s\n", (int)wname, d.name, (int)wvalue, value, origin,
		       d.summary, from, d.effective ? "" : _(" (no effect yet)"));
	}
	devcache_close(ctx);
	return status;
}

int cmd_config(const struct tool *t, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"check", required_argument, NULL, 'c'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *check = NULL;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			check = optarg;
			break;
		case 'h':
			printf(_("Usage: devcache config [--check FILE]\n"
				 "Print every tunable with its value, origin and description,\n"
				 "or check a configuration file.\n"));
			return EXIT_OK;
		default:
			fprintf(stderr, _("Try 'devcache --help' for more information.\n"));
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		tool_error(_("config: unexpected argument '%s'"), argv[optind]);
		return EXIT_USAGE;
	}
	return check ? check_file(check) : print_table(t);
}
