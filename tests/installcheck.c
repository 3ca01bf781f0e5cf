/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* installcheck.c - built by `make installcheck` against the installed library, found through pkg-config. */
#include <stdio.h>

#include <devcache.h>

int main(void)
{
	devcache_ctx_t *ctx;
	devcache_device_t *dev;
	devcache_device_info_t info;

	if (devcache_open(&ctx, "log_level:error")) {
		fprintf(stderr, "installcheck: %s\n", devcache_last_error());
		return 1;
	}
	if (devcache_device_get(ctx, "host", &dev) || devcache_device_info(dev, &info)) {
		fprintf(stderr, "installcheck: %s\n", devcache_last_error());
		devcache_close(ctx);
		return 1;
	}
	printf("installcheck: libdevcache %s, device %s\n", devcache_version_string(), info.id);
	devcache_close(ctx);
	return devcache_version() == DEVCACHE_VERSION ? 0 : 1;
}
