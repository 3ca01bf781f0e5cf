/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-config.c - `devcache config`: every tunable with its value and origin; --check FILE. */
#include "tool.h"

#include <getopt.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The description under its tunable's name, indented so. */
#define DESC_INDENT 4

static void help(void)
{
	printf(_("Usage: devcache config [--json] [--check FILE]\n"));
	fputs(_("Print every tunable with its value, where that value came from and what\n"
		"the tunable does, or check a configuration file.\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("  -c, --check=FILE             check FILE and print its errors\n"
		"  -j, --json                   print a JSON array of the tunables\n"),
	      stdout);
	tool_print_common_options();
}

static void print_error(void *user, enum devcache_log_level level, const char *message)
{
	(void)user;
	(void)level;
	tool_error("%s", message);
}

static int check_file(const char *path)
{
	int rc = devcache_config_check_file(path, print_error, NULL);

	if (rc)
		return tool_status(rc == DEVCACHE_EIO ? DEVCACHE_EIO : DEVCACHE_ECONFIG);
	printf(_("%s: valid\n"), tool_shown(path));
	return EXIT_OK;
}

/* "name = value  (origin)", then the description under it. */
static void print_tunable(const devcache_tunable_desc_t *d, const char *value, const char *origin)
{
	char *line, *desc;
	size_t w = tool_width(d->name) + 3;

	printf("%s = ", d->name);
	if (asprintf(&line, "%s  (%s)", tool_shown(value), tool_shown(tool_origin(origin))) >= 0) {
		tool_wrap(stdout, w, DESC_INDENT, line);
		free(line);
	}
	if ((desc = strdup(d->summary))) {
		char *full = NULL;

		/* TRANSLATORS: a tunable's summary, then the module that declares it. */
		if (d->module && asprintf(&full, _("%s (%s module)"), desc, d->module) >= 0)
			free(desc), desc = full;
		if (!d->effective && asprintf(&full, "%s%s", desc, _(" (no effect yet)")) >= 0)
			free(desc), desc = full;
		printf("%*s", DESC_INDENT, "");
		tool_wrap(stdout, DESC_INDENT, DESC_INDENT, desc);
		free(desc);
	}
}

static struct json_object *tunable_json(const devcache_tunable_desc_t *d, const char *value,
					const char *origin)
{
	struct json_object *o = json_object_new_object();

	if (!o)
		return NULL;
	json_object_object_add(o, "name", json_object_new_string(d->name));
	json_object_object_add(o, "value", json_object_new_string(value));
	/* As the library names it (devcache_config_get): scripts compare. */
	json_object_object_add(o, "origin", json_object_new_string(origin));
	json_object_object_add(o, "type", json_object_new_string(d->type));
	json_object_object_add(o, "default", json_object_new_string(d->default_value));
	json_object_object_add(o, "range", json_object_new_string(d->range));
	json_object_object_add(o, "group", json_object_new_string(d->group));
	json_object_object_add(o, "summary", json_object_new_string(d->summary));
	json_object_object_add(o, "module", d->module ? json_object_new_string(d->module) : NULL);
	json_object_object_add(o, "effective", json_object_new_boolean(d->effective));
	return o;
}

static int print_table(const struct tool *t, bool json)
{
	struct json_object *all = json ? json_object_new_array() : NULL;
	devcache_ctx_t *ctx;
	char value[4096];
	const char *origin;
	int status;

	if (json && !all) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	if ((status = tool_open(t, &ctx))) {
		json_object_put(all);
		return status;
	}
	if (!json)
		printf(_("NAME = VALUE (ORIGIN)\n    DESCRIPTION\n\n"));
	/* The core's tunables, then those of the loaded backend modules. */
	for (size_t i = 0; i < devcache_config_count(ctx); i++) {
		devcache_tunable_desc_t d;

		if (devcache_config_describe(ctx, i, &d) ||
		    devcache_config_get(ctx, d.name, value, sizeof value, &origin)) {
			tool_error("%s", devcache_last_error());
			status = EXIT_RUNTIME;
			continue;
		}
		if (!json) {
			print_tunable(&d, value, origin);
			continue;
		}
		struct json_object *o = tunable_json(&d, value, origin);

		if (!o) {
			tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
			status = EXIT_RUNTIME;
			break;
		}
		json_object_array_add(all, o);
	}
	if (json && status == EXIT_OK)
		puts(json_object_to_json_string_ext(all, JSON_C_TO_STRING_PRETTY |
							 JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(all);
	devcache_close(ctx);
	return status;
}

int cmd_config(struct tool *t, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"check", required_argument, NULL, 'c'},
		{"json", no_argument, NULL, 'j'},
		TOOL_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	const char *check = NULL;
	bool json = false;
	int c, status;

	while ((c = getopt_long(argc, argv, "c:j" TOOL_SHORTOPTS, longopts, NULL)) != -1) {
		switch (c) {
		case 'c':
			check = optarg;
			break;
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
	if (check && json) {
		tool_error("%s", _("--check and --json do not go together"));
		return tool_try_help();
	}
	return check ? check_file(check) : print_table(t, json);
}
