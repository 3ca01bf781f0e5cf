/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* config.c - the configuration sources (files, environment, option strings) and their precedence. */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

/* A name a backend module's tunable could have: "cuda_library". */
static bool module_shaped(const char *key)
{
	const char *u = strchr(key, '_');

	if (!u || u == key || !u[1])
		return false;
	for (const char *c = key; *c; c++)
		if (!islower((unsigned char)*c) && !isdigit((unsigned char)*c) && *c != '_')
			return false;
	return true;
}

/* Apply "key = value" from source; origin names it in errors and in
 * `devcache config`. */
static int apply_pair(struct tunable_set *set, const char *key, const char *value,
		      const char *origin, struct log_state *log)
{
	char why[768];
	struct tunable_value v;
	int id = tunable_find(key);

	if (id < 0) {
		int c = compat_find(key);

		if (c >= 0) {
			/* Its PyTorch default changes nothing there either. */
			char *given = trim_dup(value, strlen(value));

			if (!given)
				return err_oom();
			if (strcasecmp(given, compat_defs[c].pytorch_default) == 0)
				log_msg(log, DEVCACHE_LOG_INFO,
					_("%s: %s is a PyTorch option that libdevcache accepts and "
					  "ignores (here %s, PyTorch's default)"),
					origin, key, compat_defs[c].pytorch_default);
			else
				log_msg(log, DEVCACHE_LOG_WARNING,
					_("%s: %s:%s is a PyTorch option that libdevcache accepts "
					  "but does not act on: with it %s"),
					origin, key, given, compat_defs[c].note);
			free(given);
			return 0;
		}
		const char *hint = tunable_suggest(key);

		/* Possibly a backend module's, known once the modules are found. */
		if (!hint && module_shaped(key))
			return tunable_set_pending(set, key, value, origin);
		if (hint)
			return err_set(DEVCACHE_ECONFIG, _("%s: unknown tunable '%s' (did you mean '%s'?)"),
				       origin, key, hint);
		return err_set(DEVCACHE_ECONFIG,
			       _("%s: unknown tunable '%s' (devcache config lists them all)"), origin,
			       key);
	}
	int rc = tunable_parse(id, value, &v, why, sizeof why);

	if (rc)
		return err_set(rc, "%s: %s: %s", origin, key, why);
	return tunable_assign(set, id, &v, origin);
}

/* A module's tunable may be a list: its type is not known yet. */
static bool is_list(const char *key)
{
	int id = tunable_find(key);

	return id >= 0 ? tunable_defs[id].type == TT_LIST
		       : compat_find(key) < 0 && !tunable_suggest(key) && module_shaped(key);
}

/* Cut text at top-level commas: brackets protect the commas of a list. */
static size_t next_item(const char *s, size_t *len_p)
{
	size_t i = 0;
	int depth = 0;

	for (; s[i] && (s[i] != ',' || depth > 0); i++) {
		if (s[i] == '[')
			depth++;
		else if (s[i] == ']' && depth > 0)
			depth--;
	}
	*len_p = i;
	return s[i] ? i + 1 : i;
}

/* A list's value as its continuations add to it: appending is amortised
 * linear, where joining the value anew for each item made a long list
 * quadratic. */
struct growing {
	char *text;
	size_t len, cap;
};

static int grow_append(struct growing *g, const char *item)
{
	size_t n = strlen(item);

	if (g->len + n + 2 > g->cap) {
		size_t cap = g->cap ? g->cap : 64;

		while (cap < g->len + n + 2)
			cap *= 2;
		char *grown = realloc(g->text, cap);

		if (!grown)
			return err_oom();
		g->text = grown;
		g->cap = cap;
	}
	g->text[g->len++] = ',';
	memcpy(g->text + g->len, item, n + 1);
	g->len += n;
	return 0;
}

/* "key:value,key:value" as PYTORCH_CUDA_ALLOC_CONF; an item with no colon
 * continues the list of the key before it ("backends:cuda,hip").  Each
 * item is looked at once: the work is linear in the text's length. */
int config_apply_string(struct tunable_set *set, const char *text, const char *source,
			struct log_state *log)
{
	struct growing value = {0};
	char *key = NULL;
	bool list = false;
	int rc = 0;
	size_t text_len = strlen(text);

	if (text_len > CONFIG_OPTIONS_MAX)
		return err_set(DEVCACHE_ECONFIG,
			       _("%s: option string of %zu bytes is longer than the limit of %u bytes"),
			       source, text_len, CONFIG_OPTIONS_MAX);
	for (const char *s = text; *s && !rc;) {
		size_t len, step = next_item(s, &len);
		char *item = strndup(s, len);

		s += step;
		if (!item) {
			rc = err_oom();
			break;
		}
		char *t = item + strspn(item, " \t\n");
		size_t sep = strcspn(t, ":=");

		if (!*t) {
			free(item); /* "a:1,,b:2" or a trailing comma */
			continue;
		}
		if (t[sep] == '\0' && list) {
			rc = grow_append(&value, t);
			free(item);
			continue;
		}
		if (key) {
			rc = apply_pair(set, key, value.text, source, log);
			free(key);
			free(value.text);
			key = NULL;
			value = (struct growing){0};
		}
		if (!rc && t[sep] == '\0') {
			rc = err_set(DEVCACHE_ECONFIG, _("%s: expected KEY:VALUE, found '%s'"), source, t);
		} else if (!rc) {
			size_t klen = sep;

			while (klen && isspace((unsigned char)t[klen - 1]))
				klen--;
			key = strndup(t, klen);
			value.text = strdup(t + sep + 1);
			value.len = value.text ? strlen(value.text) : 0;
			value.cap = value.text ? value.len + 1 : 0;
			if (!key || !value.text)
				rc = err_oom();
			else if (!*key)
				rc = err_set(DEVCACHE_ECONFIG, _("%s: missing key before '%s'"), source, t);
			else
				list = is_list(key) && value.text[0] != '[';
		}
		free(item);
	}
	if (!rc && key)
		rc = apply_pair(set, key, value.text, source, log);
	free(key);
	free(value.text);
	return rc;
}

/* Parse one line of a file; 0 for a blank or comment line. */
static int apply_line(struct tunable_set *set, char *line, const char *origin,
		      struct log_state *log)
{
	char *s = line + strspn(line, " \t");
	size_t len = strcspn(s, "\r\n");

	s[len] = '\0';
	if (*s == '#' || *s == '\0')
		return 0;
	for (char *c = s + 1; *c; c++)
		if (*c == '#' && (c[-1] == ' ' || c[-1] == '\t')) {
			*c = '\0';
			break;
		}
	size_t klen = strcspn(s, " \t=:");
	char *sep = s + klen + strspn(s + klen, " \t");

	if (klen == 0 || (*sep != '=' && *sep != ':'))
		return err_set(DEVCACHE_ECONFIG, _("%s: expected 'KEY = VALUE', found '%s'"),
			       origin, s);
	s[klen] = '\0';
	return apply_pair(set, s, sep + 1, origin, log);
}

static int too_large(const char *path, uint64_t size)
{
	return err_set(DEVCACHE_ECONFIG,
		       _("%s: configuration file of %llu bytes is larger than the limit of %u bytes"),
		       path, (unsigned long long)size, CONFIG_FILE_MAX);
}

/* Open a configuration file for reading into *fd_p, which stays -1 for a
 * missing file that may be skipped; *size_p is its size.  Anything but a
 * regular file is refused at once: a FIFO would block the open until a
 * writer came, and a device such as /dev/zero would never end. */
static int open_file(const char *path, bool must_exist, int *fd_p, size_t *size_p)
{
	/* O_NONBLOCK: no effect on a regular file's reads. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;

	*fd_p = -1;
	if (fd < 0 || fstat(fd, &st) != 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		if (e == ENOENT && !must_exist)
			return 0;
		return err_set(e == ENOENT ? DEVCACHE_ECONFIG : DEVCACHE_EIO,
			       _("%s: cannot open configuration file: %s"), path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return err_set(DEVCACHE_EIO, _("%s: not a regular file"), path);
	}
	if ((uint64_t)st.st_size > CONFIG_FILE_MAX) {
		close(fd);
		return too_large(path, (uint64_t)st.st_size);
	}
	*fd_p = fd;
	*size_p = (size_t)st.st_size;
	return 0;
}

/* The whole file, NUL-terminated, into *buf_p, with read() itself: an
 * interrupted or short read goes on, a failed one is an error naming the
 * file (stdio's getline() would end the file early when memory ran out).
 * A file that grows while it is read stops at the size limit. */
static int read_file(int fd, const char *path, size_t size, char **buf_p, size_t *len_p)
{
	size_t cap = size < 4096 ? 4096 : size + 1, len = 0;
	char *buf = malloc(cap + 1);

	*buf_p = NULL;
	if (!buf)
		return err_set(DEVCACHE_ENOMEM, _("%s: out of memory reading the configuration file"),
			       path);
	for (;;) {
		if (len == cap) {
			char *more;

			if (cap > CONFIG_FILE_MAX) {
				free(buf);
				return too_large(path, len);
			}
			cap = cap > CONFIG_FILE_MAX / 2 ? CONFIG_FILE_MAX + 1 : 2 * cap;
			if (!(more = realloc(buf, cap + 1))) {
				free(buf);
				return err_set(DEVCACHE_ENOMEM,
					       _("%s: out of memory reading the configuration file"),
					       path);
			}
			buf = more;
		}
		ssize_t n = read(fd, buf + len, cap - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			free(buf);
			return err_set(DEVCACHE_EIO, _("%s: read error: %s"), path, strerror(e));
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	if (len > CONFIG_FILE_MAX) {
		free(buf);
		return too_large(path, len);
	}
	buf[len] = '\0';
	*buf_p = buf;
	*len_p = len;
	return 0;
}

int config_apply_file(struct tunable_set *set, const char *path, bool must_exist,
		      struct log_state *log, config_report_fn report, void *user)
{
	char *buf = NULL, origin[4096 + 32];
	size_t size = 0, len = 0;
	int fd, rc = open_file(path, must_exist, &fd, &size), first = 0;

	if (fd >= 0) {
		rc = read_file(fd, path, size, &buf, &len);
		close(fd);
	}
	if (!buf) {
		if (rc && report)
			report(user, devcache_last_error());
		return rc;
	}
	char *line = buf, *end = buf + len;

	for (unsigned long n = 1; line < end; n++) {
		char *nl = memchr(line, '\n', (size_t)(end - line));
		char *next = nl ? nl + 1 : end;

		if (nl)
			*nl = '\0';
		snprintf(origin, sizeof origin, "%s:%lu", path, n);
		rc = apply_line(set, line, origin, log);
		line = next;
		if (rc && report) {
			report(user, devcache_last_error());
			if (!first)
				first = rc;
			continue;
		}
		if (rc)
			break;
	}
	free(buf);
	return first ? first : rc;
}

int config_apply_sources(struct tunable_set *set, const struct config_sources *src,
			 struct log_state *log)
{
	int rc = 0;

	if (src->system_file)
		rc = config_apply_file(set, src->system_file, false, log, NULL, NULL);
	if (!rc && src->user_file)
		rc = config_apply_file(set, src->user_file, false, log, NULL, NULL);
	if (!rc && src->conf_file)
		rc = config_apply_file(set, src->conf_file, true, log, NULL, NULL);
	if (!rc && src->backend_path) {
		char why[512];
		struct tunable_value v;

		rc = tunable_parse(TUN_backend_path, src->backend_path, &v, why, sizeof why);
		if (rc)
			rc = err_set(rc, "DEVCACHE_BACKEND_PATH: %s", why);
		else
			rc = tunable_assign(set, TUN_backend_path, &v, "DEVCACHE_BACKEND_PATH");
	}
	/* PyTorch's own variable, for the program that runs torch: below
	 * DEVCACHE_OPTIONS, so that ours can override a setting made for torch. */
	if (!rc && src->torch_options)
		rc = config_apply_string(set, src->torch_options, "PYTORCH_CUDA_ALLOC_CONF", log);
	/* Set at all, whatever its value, as PyTorch reads it: no caching. */
	if (!rc && src->torch_no_caching)
		rc = config_apply_string(set, "caching:false", "PYTORCH_NO_CUDA_MEMORY_CACHING", log);
	if (!rc && src->env_options)
		rc = config_apply_string(set, src->env_options, "DEVCACHE_OPTIONS", log);
	if (!rc && src->options)
		rc = config_apply_string(set, src->options, "devcache_open", log);
	return rc;
}

/* Set-user-ID and similar programs read no DEVCACHE_* variable at all. */
static bool secure_mode(void)
{
	return getauxval(AT_SECURE) != 0;
}

static const char *env(const char *name)
{
	const char *v = secure_getenv(name);

	return v && *v ? v : NULL;
}

int config_sources_from_env(struct config_sources *src, char **user_p)
{
	const char *xdg = env("XDG_CONFIG_HOME"), *home = env("HOME");
	char *user = NULL;
	int n = 0;

	*user_p = NULL;
	src->system_file = SYSCONFDIR "/devcache.conf";
	if (secure_mode())
		return 0;
	/* The user's file is never skipped for want of memory to name it. */
	if (xdg && xdg[0] == '/')
		n = asprintf(&user, "%s/devcache/devcache.conf", xdg);
	else if (home)
		n = asprintf(&user, "%s/.config/devcache/devcache.conf", home);
	if (n < 0)
		return err_set(DEVCACHE_ENOMEM,
			       _("out of memory naming the user's configuration file"));
	*user_p = user;
	src->user_file = user;
	src->conf_file = env("DEVCACHE_CONF");
	src->backend_path = env("DEVCACHE_BACKEND_PATH");
	src->env_options = env("DEVCACHE_OPTIONS");
	return 0;
}

static const char *const known_env[] = {
	"DEVCACHE_CONF", "DEVCACHE_OPTIONS", "DEVCACHE_BACKEND_PATH", "DEVCACHE_LOCALEDIR",
};

/* A typo in a variable name would otherwise be silently ignored. */
void config_warn_unknown_env(struct log_state *log)
{
	if (secure_mode())
		return;
	for (char **e = environ; e && *e; e++) {
		size_t len = strcspn(*e, "=");
		char name[128];
		bool known = false;

		if (strncmp(*e, "DEVCACHE_", 9) != 0 || len >= sizeof name)
			continue;
		snprintf(name, sizeof name, "%.*s", (int)len, *e);
		for (size_t i = 0; i < sizeof known_env / sizeof *known_env; i++)
			known = known || strcmp(name, known_env[i]) == 0;
		if (known)
			continue;
		const char *tunable = tunable_suggest(name + 9);
		/* PyTorch's options are not to be set through DEVCACHE_OPTIONS. */
		if (tunable && tunable_find(tunable) < 0)
			tunable = NULL;
		if (tunable && strcasecmp(tunable, name + 9) == 0) {
			log_msg(log, DEVCACHE_LOG_WARNING,
				_("environment variable %s is ignored: set tunables with "
				  "DEVCACHE_OPTIONS=%s:VALUE"),
				name, tunable);
			continue;
		}
		const char *best = NULL;
		for (size_t i = 0; i < sizeof known_env / sizeof *known_env; i++)
			if (strncmp(name, known_env[i], 11) == 0 ||
			    strcasecmp(name, known_env[i]) == 0)
				best = known_env[i];
		if (best)
			log_msg(log, DEVCACHE_LOG_WARNING,
				_("unknown environment variable %s is ignored (did you mean %s?)"),
				name, best);
		else if (tunable)
			log_msg(log, DEVCACHE_LOG_WARNING,
				_("unknown environment variable %s is ignored (did you mean "
				  "DEVCACHE_OPTIONS=%s:VALUE?)"),
				name, tunable);
		else
			log_msg(log, DEVCACHE_LOG_WARNING,
				_("unknown environment variable %s is ignored (libdevcache reads "
				  "DEVCACHE_CONF, DEVCACHE_OPTIONS, DEVCACHE_BACKEND_PATH and "
				  "DEVCACHE_LOCALEDIR)"),
				name);
	}
}
