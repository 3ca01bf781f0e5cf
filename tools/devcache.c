/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* devcache.c - the devcache command: option parsing, subcommand dispatch, shared helpers. */
#include "tool.h"

#include <errno.h>
#include <getopt.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The command running, for the prefix of its messages; set once by main. */
static const char *command_name;

void tool_error(const char *fmt, ...)
{
	va_list ap;

	if (command_name)
		fprintf(stderr, "devcache %s: ", command_name);
	else
		fputs("devcache: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int tool_try_help(void)
{
	if (command_name)
		fprintf(stderr, _("Try 'devcache %s --help' for more information.\n"), command_name);
	else
		fputs(_("Try 'devcache --help' for more information.\n"), stderr);
	return EXIT_USAGE;
}

int tool_no_operands(int argc, char **argv)
{
	if (optind >= argc)
		return 0;
	tool_error(_("unexpected argument '%s'"), argv[optind]);
	return tool_try_help();
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

bool tool_parse_size(const char *text, uint64_t *bytes_p)
{
	static const char units[] = "KMGT";
	char *end;
	double n;

	if (!text || !(*text >= '0' && *text <= '9'))
		return false;
	errno = 0;
	n = strtod(text, &end);
	if (errno || end == text)
		return false;
	if (*end) {
		const char *u = strchr(units, end[0] & ~0x20);

		if (!u || !end[0])
			return false;
		for (int k = 0; k <= u - units; k++)
			n *= 1024.0;
		end++;
		if (strcmp(end, "iB") != 0 && strcmp(end, "B") != 0 && strcmp(end, "") != 0)
			return false;
	} else if (n != (double)(uint64_t)n) {
		return false; /* a fraction of a byte */
	}
	if (!(n >= 1) || n >= 18446744073709549568.0)
		return false;
	*bytes_p = (uint64_t)n;
	return true;
}

uint64_t tool_proc_kb(const char *path, const char *key)
{
	FILE *f = fopen(path, "re");
	size_t len = strlen(key);
	unsigned long long kb = 0;
	char line[256];

	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, len) == 0 && line[len] == ':' &&
		    sscanf(line + len + 1, "%llu kB", &kb) == 1)
			break;
	fclose(f);
	return (uint64_t)kb * 1024;
}

bool tool_option_given(const struct tool *t, const char *name)
{
	size_t len = strlen(name);

	for (const char *p = t->options; p && (p = strstr(p, name)); p += len)
		if ((p == t->options || p[-1] == ',') && (p[len] == ':' || p[len] == '='))
			return true;
	return false;
}

bool tool_add_options(struct tool *t, const char *more)
{
	char *joined;

	if (!*more)
		return true;
	if (asprintf(&joined, "%s%s%s", t->options ? t->options : "", t->options ? "," : "",
		     more) < 0) {
		tool_error("%s", devcache_strerror(DEVCACHE_ENOMEM));
		return false;
	}
	free(t->options);
	t->options = joined;
	return true;
}

int tool_common_option(struct tool *t, int c, const char *arg)
{
	switch (c) {
	case 'o':
		return tool_add_options(t, arg) ? -1 : EXIT_RUNTIME;
	case 'v':
		t->verbose++;
		return -1;
	default:
		return tool_try_help();
	}
}

/* The library names the options of devcache_open() after the function; here
 * they are the command line's. */
static void open_error(const char *message)
{
	static const char prefix[] = "devcache_open: ";

	if (strncmp(message, prefix, sizeof prefix - 1) == 0)
		/* TRANSLATORS: where a tunable given with -o came from. */
		tool_error("%s: %s", _("command line (-o)"), message + sizeof prefix - 1);
	else
		tool_error("%s", message);
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
		open_error(devcache_last_error());
		return tool_status(rc);
	}
	/* Only a program that runs torch through devcache-torch(3) reads it:
	 * say so, or a user believes its settings replayed. */
	const char *torch = getenv("PYTORCH_CUDA_ALLOC_CONF");
	if (torch && *torch)
		tool_error(_("PYTORCH_CUDA_ALLOC_CONF is set, and this tool does not read it (programs "
			     "that run PyTorch with libdevcache's allocator do): give its settings "
			     "with -o or DEVCACHE_OPTIONS"));
	return EXIT_OK;
}

const char *tool_origin(const char *origin)
{
	return strcmp(origin, "devcache_open") == 0 ? _("command line") : origin;
}

void tool_print_common_options(void)
{
	fputs(_("  -o, --options=KEY:VALUE,...  set tunables (over those given before the\n"
		"                               command)\n"
		"  -v, --verbose                log more (twice: debug)\n"
		"  -h, --help                   show this help and exit\n"),
	      stdout);
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
		"  tune TRACE            which PyTorch allocator settings avoid its OOMs\n"
		"  inspect FILE...       list a model file's metadata and tensors\n"
		"  load FILE...          load model files through the cache; time and memory\n"
		"  dump FILE TENSOR      write a tensor's bytes as a device holds them\n"
		"  demo                  walk a small model through the cache, step by step\n"
		"  help [COMMAND]        show this help, or a command's\n"),
	      out);
	fputs("\n", out);
	fputs(_("Options (before the command, or after it):\n"
		"  -o, --options=KEY:VALUE,...  set tunables (highest precedence)\n"
		"  -v, --verbose                log more (twice: debug)\n"
		"  -h, --help                   show this help and exit\n"
		"  -V, --version                show the version and exit\n"),
	      out);
	fputs("\n", out);
	fputs(_("'devcache COMMAND --help' shows a command's own options.\n"
		"Exit status: 0 success, 1 runtime failure, 2 usage or configuration error.\n"
		"See devcache(1) and devcache.conf(5).\n"),
	      out);
}

static int cmd_help(struct tool *t, int argc, char **argv);

static const struct command {
	const char *name;
	int (*run)(struct tool *t, int argc, char **argv);
} commands[] = {
	{"info", cmd_info},
	{"config", cmd_config},
	{"replay", cmd_replay},
	{"tune", cmd_tune},
	{"inspect", cmd_inspect},
	{"load", cmd_load},
	{"dump", cmd_dump},
	{"demo", cmd_demo},
	{"help", cmd_help},
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
		if (strcmp(name, commands[i].name) == 0)
			return &commands[i];
	return NULL;
}

static void help_help(void)
{
	printf(_("Usage: devcache help [COMMAND]\n"));
	fputs(_("Show the help of the devcache command, or that of COMMAND (the same as\n"
		"'devcache COMMAND --help').\n"),
	      stdout);
}

/* `devcache help [COMMAND]`: COMMAND's own --help. */
static int cmd_help(struct tool *t, int argc, char **argv)
{
	const struct command *cmd;
	char help_opt[] = "--help";

	if (argc > 1 && strcmp(argv[1], "--help") && strcmp(argv[1], "-h")) {
		if (argc > 2) {
			tool_error(_("unexpected argument '%s'"), argv[2]);
			return tool_try_help();
		}
		if (!(cmd = find_command(argv[1]))) {
			tool_error(_("unknown command '%s'"), argv[1]);
			command_name = NULL;
			return tool_try_help();
		}
		char *args[] = {argv[1], help_opt, NULL};

		command_name = cmd->name;
		optind = 0;
		return cmd->run(t, 2, args);
	}
	if (argc > 1)
		help_help();
	else
		usage(stdout);
	return EXIT_OK;
}

/* The hidden listings the bash completion reads: commands, tunables (the
 * modules' too, where a context opens), devices. */
static int list_for_completion(const struct tool *t, const char *what)
{
	devcache_ctx_t *ctx = NULL;
	devcache_tunable_desc_t d;

	if (strcmp(what, "commands") == 0) {
		for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
			puts(commands[i].name);
		return EXIT_OK;
	}
	if (strcmp(what, "tunables") != 0 && strcmp(what, "devices") != 0) {
		tool_error(_("unknown listing '%s'"), what);
		return EXIT_USAGE;
	}
	if (devcache_open(&ctx, t->options) != 0)
		ctx = NULL;
	if (strcmp(what, "tunables") == 0 && !ctx)
		for (size_t i = 0; devcache_tunable_describe(i, &d) == 0; i++)
			puts(d.name);
	else if (strcmp(what, "tunables") == 0)
		for (size_t i = 0; devcache_config_describe(ctx, i, &d) == 0; i++)
			puts(d.name);
	for (size_t i = 0; ctx && strcmp(what, "devices") == 0 && i < devcache_device_count(ctx);
	     i++) {
		devcache_device_t *dev;
		devcache_device_info_t info;

		if (devcache_device_at(ctx, i, &dev) == 0 && devcache_device_info(dev, &info) == 0)
			puts(info.id);
	}
	devcache_close(ctx);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	enum { OPT_LIST = 0x100 };
	static const struct option longopts[] = {
		{"options", required_argument, NULL, 'o'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{"list", required_argument, NULL, OPT_LIST}, /* for the bash completion */
		{NULL, 0, NULL, 0},
	};
	struct tool t = {0};
	const struct command *cmd;
	int c, status;

	setlocale(LC_ALL, "");
#if ENABLE_NLS
	const char *dir = secure_getenv("DEVCACHE_LOCALEDIR");
	bindtextdomain(PACKAGE, dir && *dir ? dir : LOCALEDIR);
	textdomain(PACKAGE);
#endif
	/* '+': the command's own options come after it. */
	while ((c = getopt_long(argc, argv, "+o:vhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return EXIT_OK;
		case 'V':
			printf("devcache (%s) %s\n", PACKAGE_NAME, devcache_version_string());
			return EXIT_OK;
		case OPT_LIST:
			return list_for_completion(&t, optarg);
		default:
			if ((status = tool_common_option(&t, c, optarg)) >= 0)
				return status;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, _("Usage: devcache [OPTION]... COMMAND [ARG]...\n"));
		status = tool_try_help();
	} else if (!(cmd = find_command(argv[optind]))) {
		tool_error(_("unknown command '%s'"), argv[optind]);
		status = tool_try_help();
	} else {
		int first = optind;

		command_name = cmd->name;
		/* 0: getopt starts afresh on the command's arguments, so its
		 * options may also follow its operands. */
		optind = 0;
		status = cmd->run(&t, argc - first, argv + first);
	}
	free(t.options);
	return status;
}
