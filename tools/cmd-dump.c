/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* cmd-dump.c - `devcache dump`: one tensor's bytes as a device holds them, copied back and written out. */
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dump_opts {
	const char *device;
	const char *output; /* NULL or "-": standard output */
};

static void help(void)
{
	printf(_("Usage: devcache dump [--device D] [--output OUT] FILE TENSOR\n"));
	fputs(_("Load FILE through the model cache onto a device, copy the bytes of\n"
		"TENSOR back from it and write them, raw, to OUT or standard output\n"
		"(not a terminal).\n"),
	      stdout);
	fputs("\n", stdout);
	fputs(_("  -d, --device=D               load onto device D (default: host)\n"
		"  -O, --output=OUT             write to the file OUT (default: standard\n"
		"                               output)\n"),
	      stdout);
	tool_print_common_options();
}

/* Returns -1 to go on, or the exit status. */
static int parse_args(struct tool *t, struct dump_opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"device", required_argument, NULL, 'd'},
		{"output", required_argument, NULL, 'O'},
		TOOL_LONGOPTS,
		{NULL, 0, NULL, 0},
	};
	int c, status;

	while ((c = getopt_long(argc, argv, "d:O:" TOOL_SHORTOPTS, longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			o->device = optarg;
			break;
		case 'O':
			o->output = optarg;
			break;
		case 'h':
			help();
			return EXIT_OK;
		default:
			if ((status = tool_common_option(t, c, optarg)) >= 0)
				return status;
		}
	}
	if (argc - optind != 2) {
		tool_error("%s", argc - optind < 2 ? _("expected FILE and TENSOR")
						   : _("too many arguments"));
		return tool_try_help();
	}
	if (o->output && strcmp(o->output, "-") == 0)
		o->output = NULL;
	/* Raw tensor bytes would garble the terminal, and are no use there. */
	if (!o->output && isatty(STDOUT_FILENO)) {
		tool_error("%s", _("refusing to write binary data to a terminal; "
				   "use --output OUT or redirect standard output"));
		return EXIT_USAGE;
	}
	return -1;
}

static int write_all(int fd, const unsigned char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_out(const char *path, const unsigned char *buf, size_t len)
{
	int fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666) : STDOUT_FILENO;

	if (fd < 0) {
		tool_error(_("cannot open %s: %s"), path, strerror(errno));
		return EXIT_RUNTIME;
	}
	if (write_all(fd, buf, len) != 0) {
		tool_error(_("cannot write %s: %s"), path ? path : _("standard output"),
			   strerror(errno));
		if (path)
			close(fd);
		return EXIT_RUNTIME;
	}
	/* close() is where a full disk on NFS is reported. */
	if (path && close(fd) != 0) {
		tool_error(_("cannot write %s: %s"), path, strerror(errno));
		return EXIT_RUNTIME;
	}
	return EXIT_OK;
}

/* The tensor, copied from where it is into a buffer of its own and written. */
static int dump_tensor(const devcache_model_t *model, const char *name, const char *output)
{
	devcache_tensor_info_t info;
	unsigned char *buf;
	void *data;
	int status;

	if (devcache_model_tensor(model, name, &info, &data)) {
		/* The message names the file and the tensor. */
		tool_error("%s", devcache_last_error());
		return EXIT_RUNTIME;
	}
	if ((size_t)info.size != info.size || !(buf = malloc(info.size ? (size_t)info.size : 1))) {
		tool_error(_("%s: cannot allocate %llu bytes: %s"), name,
			   (unsigned long long)info.size, devcache_strerror(DEVCACHE_ENOMEM));
		return EXIT_RUNTIME;
	}
	/* From the device, or from the mapping with a check before and after:
	 * a file truncated meanwhile is an error, not SIGBUS. */
	if (devcache_model_tensor_copy(model, name, buf, (size_t)info.size)) {
		tool_error(_("%s: cannot copy it: %s"), name, devcache_last_error());
		free(buf);
		return EXIT_RUNTIME;
	}
	status = write_out(output, buf, (size_t)info.size);
	free(buf);
	return status;
}

int cmd_dump(struct tool *t, int argc, char **argv)
{
	struct dump_opts o = {.device = "host"};
	devcache_model_t *model;
	devcache_device_t *dev;
	devcache_ctx_t *ctx;
	int status;

	if ((status = parse_args(t, &o, argc, argv)) >= 0)
		return status;
	const char *path = argv[optind], *name = argv[optind + 1];
	if ((status = tool_open(t, &ctx)))
		return status;
	if ((status = tool_device(ctx, o.device, &dev))) {
		devcache_close(ctx);
		return status;
	}
	if (devcache_model_load(ctx, path, dev, NULL, &model)) {
		tool_error("%s", devcache_last_error());
		devcache_close(ctx);
		return EXIT_RUNTIME;
	}
	status = dump_tensor(model, name, o.output);
	devcache_model_release(model);
	devcache_close(ctx);
	return status;
}
