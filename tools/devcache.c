/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* devcache.c - the devcache command: option parsing, subcommand dispatch, shared helpers. */
#include "tool.h"

#include <getopt.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tool_error(const char *fmt, ...)
{
	va_list ap;

	fputs("devcache: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int tool_status(int err)
{
	return err == DEVCACHE_ECONFIG || err == DEVCACHE_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
}

int tool_device(devcache_ctx_t *ctx, const char *name, devcache_device_t **dev_p)
{
	int rc = devcache_device_get(ctx, name, dev_p);

	if (rc) {
		tool_error("%s", devcache_last_error());
		return tool_status(rc);
	}
	return EXIT_OK;
}

int tool_open(const struct tool *t, devcache_ctx_t **ctx_p)
{
	static const char *const levels[] = {"", ",log_level:info", ",log_level:debug"};
	char *options;
	int rc;

	/* -v comes after -o, so the explicit flag wins. */
	if (asprintf(&options, "%s%s", t->options ? t->options : "",
		     levels[t->verbose > 2 ? 2 : t->verbose]) < 0) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	rc = devcache_open(ctx_p, options[0] == ',' ? options + 1 : options);
	free(options);
	if (rc) {
		tool_error("%s", devcache_last_error());
		return tool_status(rc);
	}
	return EXIT_OK;
}

void tool_format_bytes(uint64_t bytes, char *buf, size_t size)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024 && u < 4)
		v /= 1024, u++;
	if (u == 0)
		snprintf(buf, size, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, size, "%.1f %s", v, units[u]);
}

static void usage(FILE *out)
{
	fprintf(out, _("Usage: devcache [OPTION]... COMMAND [ARG]...\n"));
	fputs(_("Inspect and configure libdevcache, the accelerator memory manager.\n"), out);
	fputs("\n", out);
	fputs(_("Commands:\n"
		"  info                  list the backends and devices found\n"
		"  config                print every tunable with its value and origin\n"
		"  config --check FILE   check a configuration file\n"
		"  replay TRACE...       replay allocation traces through the allocator\n"
		"  inspect FILE...       list a safetensors or GGUF file's metadata and tensors\n"
		"  load FILE...          load model files through the cache; time and memory\n"
		"  dump FILE TENSOR      write a tensor's bytes as a device holds them\n"
		"  demo                  walk a small model through the cache, step by step\n"
		"  help                  show this help\n"),
	      out);
	fputs("\n", out);
	fputs(_("Options:\n"
		"  -o, --options=KEY:VALUE,...  set tunables (highest precedence)\n"
		"  -v, --verbose                log more (twice: debug)\n"
		"  -h, --help                   show this help and exit\n"
		"  -V, --version                show the version and exit\n"),
	      out);
	fputs("\n", out);
	fputs(_("Exit status: 0 success, 1 runtime failure, 2 usage or configuration error.\n"
		"See devcache(1) and devcache.conf(5).\n"),
	      out);
}

static int cmd_help(const struct tool *t, int argc, char **argv)
{
	(void)t, (void)argc, (void)argv;
	usage(stdout);
	return EXIT_OK;
}

static const struct command {
	const char *name;
	int (*run)(const struct tool *t, int argc, char **argv);
} commands[] = {
	{"info", cmd_info},
	{"config", cmd_config},
	{"replay", cmd_replay},
	{"inspect", cmd_inspect},
	{"load", cmd_load},
	{"dump", cmd_dump},
	{"demo", cmd_demo},
	{"help", cmd_help},
};

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"options", required_argument, NULL, 'o'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	struct tool t = {0};
	int c;

	setlocale(LC_ALL, "");
#if ENABLE_NLS
	const char *dir = secure_getenv("DEVCACHE_LOCALEDIR");
	bindtextdomain(PACKAGE, dir && *dir ? dir : LOCALEDIR);
	textdomain(PACKAGE);
#endif
	/* '+': options after the command belong to the command. */
	while ((c = getopt_long(argc, argv, "+o:vhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			t.options = optarg;
			break;
		case 'v':
			t.verbose++;
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		case 'V':
			printf("devcache (%s) %s\n", PACKAGE_NAME, devcache_version_string());
			return EXIT_OK;
		default:
			fprintf(stderr, _("Try 'devcache --help' for more information.\n"));
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
		if (strcmp(argv[optind], commands[i].name) == 0)
			return commands[i].run(&t, argc - optind, argv + optind);
	tool_error(_("unknown command '%s'"), argv[optind]);
	fprintf(stderr, _("Try 'devcache --help' for more information.\n"));
	return EXIT_USAGE;
}
