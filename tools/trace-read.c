/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* trace-read.c - reads allocation traces, plain or gzip-compressed, checking every line, into replayable events. */
#include "tool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "trace-read.h"

/* What is known of an ID in the file being read.  Freed IDs are kept so
 * that a second free can say where the first one was. */
enum id_state { ID_EMPTY, ID_LIVE, ID_FREED };

struct id_entry {
	uint64_t id;
	uint64_t line; /* of its allocation while live, of its free once freed */
	uint32_t slot;
	uint8_t state;
};

struct reader {
	struct trace_set *set;
	const char *path;
	gzFile gz;
	uint64_t line_no;
	char *err;
	size_t err_size;
	/* the input, read in blocks */
	unsigned char buf[1 << 16];
	size_t pos, len;
	bool eof;
	/* open addressing, linear probing; the hash is keyed with a random
	 * seed, so a trace cannot be written to make every ID collide */
	struct id_entry *ids;
	size_t ids_mask, ids_used;
	uint64_t seed;
};

void trace_set_init(struct trace_set *set)
{
	memset(set, 0, sizeof *set);
}

void trace_set_destroy(struct trace_set *set)
{
	for (size_t i = 0; i < set->n_files; i++)
		free(set->files[i].path);
	free(set->files);
	free(set->events);
	free(set->free_slots);
	trace_set_init(set);
}

/* ---- errors ------------------------------------------------------------- */

static int fail(struct reader *r, int code, const char *fmt, ...) DEVCACHE_PRINTF(3, 4);

static int fail(struct reader *r, int code, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(r->err, r->err_size, "%s:%llu: ", r->path, (unsigned long long)r->line_no);

	if (n >= 0 && (size_t)n < r->err_size) {
		va_start(ap, fmt);
		vsnprintf(r->err + n, r->err_size - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return code;
}

static int out_of_memory(struct reader *r)
{
	snprintf(r->err, r->err_size, _("%s: out of memory after line %llu"), r->path,
		 (unsigned long long)r->line_no);
	return DEVCACHE_ENOMEM;
}

/* A field of a bad line, fit to quote in a message: at most 40 bytes (not
 * cutting a UTF-8 character), control characters as '?'. */
static const char *quote(const char *field, char out[48])
{
	size_t n = strlen(field), max = 40;
	bool cut = n > max;

	if (cut) {
		n = max;
		while (n > 0 && ((unsigned char)field[n] & 0xc0) == 0x80)
			n--;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)field[i] < 0x20 || field[i] == 0x7f ? '?' : field[i];
	strcpy(out + n, cut ? "..." : "");
	return out;
}

/* ---- growing arrays --------------------------------------------------------- */

/* Room for one more element in *array (count used of *cap). */
static bool grow(void **array, size_t *cap, size_t count, size_t elem)
{
	if (count < *cap)
		return true;
	size_t n = *cap ? *cap * 2 : 1024;
	if (n < *cap || n > SIZE_MAX / elem)
		return false;
	void *p = realloc(*array, n * elem);
	if (!p)
		return false;
	*array = p;
	*cap = n;
	return true;
}

static int push_event(struct reader *r, struct trace_event ev)
{
	struct trace_set *set = r->set;

	if (!grow((void **)&set->events, &set->cap_events, set->n_events, sizeof *set->events))
		return out_of_memory(r);
	set->events[set->n_events++] = ev;
	return 0;
}

/* ---- the ID table ------------------------------------------------------------- */

static uint64_t hash(const struct reader *r, uint64_t id)
{
	uint64_t z = id ^ r->seed;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static struct id_entry *lookup(struct reader *r, uint64_t id)
{
	size_t i = hash(r, id) & r->ids_mask;

	while (r->ids[i].state != ID_EMPTY && r->ids[i].id != id)
		i = (i + 1) & r->ids_mask;
	return &r->ids[i];
}

/* Keep the table at most half full. */
static bool ids_reserve(struct reader *r)
{
	if (r->ids && r->ids_used + 1 <= (r->ids_mask + 1) / 2)
		return true;
	size_t size = r->ids ? (r->ids_mask + 1) * 2 : 4096;
	if (size == 0 || size > SIZE_MAX / sizeof *r->ids)
		return false;
	struct id_entry *old = r->ids, *ids = calloc(size, sizeof *ids);
	size_t old_size = old ? r->ids_mask + 1 : 0;
	if (!ids)
		return false;
	r->ids = ids;
	r->ids_mask = size - 1;
	for (size_t i = 0; i < old_size; i++)
		if (old[i].state != ID_EMPTY)
			*lookup(r, old[i].id) = old[i];
	free(old);
	return true;
}

/* ---- slots ---------------------------------------------------------------------- */

static int take_slot(struct reader *r, uint32_t *slot_p)
{
	struct trace_set *set = r->set;

	if (set->n_free_slots) {
		*slot_p = set->free_slots[--set->n_free_slots];
		return 0;
	}
	if (set->n_slots == UINT32_MAX)
		return fail(r, DEVCACHE_EFORMAT, _("more than %u blocks live at once"),
			    (unsigned)UINT32_MAX);
	/* Make sure the slot can be given back without failing later. */
	if (!grow((void **)&set->free_slots, &set->cap_free_slots, set->n_slots + 1,
		  sizeof *set->free_slots))
		return out_of_memory(r);
	*slot_p = set->n_slots++;
	return 0;
}

/* Cannot fail: take_slot made room for every slot there is. */
static void give_slot(struct trace_set *set, uint32_t slot)
{
	set->free_slots[set->n_free_slots++] = slot;
}

/* ---- numbers ---------------------------------------------------------------------- */

enum { NUM_OK, NUM_INVALID, NUM_TOO_LARGE };

/* Decimal digits only: no sign, no space, no other base. */
static int parse_number(const char *s, uint64_t max, uint64_t *v_p)
{
	uint64_t v = 0;

	if (!*s)
		return NUM_INVALID;
	for (const char *p = s; *p; p++)
		if (*p < '0' || *p > '9')
			return NUM_INVALID;
	for (; *s; s++) {
		unsigned d = (unsigned)(*s - '0');

		if (v > (max - d) / 10)
			return NUM_TOO_LARGE;
		v = v * 10 + d;
	}
	*v_p = v;
	return NUM_OK;
}

static int parse_id(struct reader *r, const char *field, uint64_t *id_p)
{
	char q[48];

	switch (parse_number(field, UINT64_MAX, id_p)) {
	case NUM_OK:
		return 0;
	case NUM_TOO_LARGE:
		return fail(r, DEVCACHE_EFORMAT, _("ID '%s' is too large (at most %llu)"),
			    quote(field, q), (unsigned long long)UINT64_MAX);
	default:
		return fail(r, DEVCACHE_EFORMAT, _("invalid ID '%s' (expected a decimal number)"),
			    quote(field, q));
	}
}

/* ---- the events ---------------------------------------------------------------------- */

static int alloc_event(struct reader *r, char **field, size_t n)
{
	uint64_t id, size, stream = 0;
	struct id_entry *e;
	uint32_t slot = 0;
	char q[48];
	int rc;

	if (n < 3)
		return fail(r, DEVCACHE_EFORMAT,
			    _("an allocation needs an ID and a size: '+ ID SIZE [STREAM]'"));
	if (n > 4)
		return fail(r, DEVCACHE_EFORMAT,
			    _("unexpected '%s' after the stream index: '+ ID SIZE [STREAM]'"),
			    quote(field[4], q));
	if ((rc = parse_id(r, field[1], &id)))
		return rc;
	switch (parse_number(field[2], SIZE_MAX, &size)) {
	case NUM_OK:
		break;
	case NUM_TOO_LARGE:
		return fail(r, DEVCACHE_EFORMAT, _("size '%s' is too large (at most %llu)"),
			    quote(field[2], q), (unsigned long long)SIZE_MAX);
	default:
		return fail(r, DEVCACHE_EFORMAT,
			    _("invalid size '%s' (expected a decimal number of bytes)"),
			    quote(field[2], q));
	}
	if (size == 0)
		return fail(r, DEVCACHE_EFORMAT, _("size 0: an allocation is at least 1 byte"));
	if (n == 4) {
		switch (parse_number(field[3], TRACE_STREAM_MAX, &stream)) {
		case NUM_OK:
			break;
		case NUM_TOO_LARGE:
			return fail(r, DEVCACHE_EFORMAT,
				    _("stream index '%s' is too large (at most %u)"),
				    quote(field[3], q), (unsigned)TRACE_STREAM_MAX);
		default:
			return fail(r, DEVCACHE_EFORMAT,
				    _("invalid stream index '%s' (expected a decimal number)"),
				    quote(field[3], q));
		}
	}
	if (!ids_reserve(r))
		return out_of_memory(r);
	e = lookup(r, id);
	if (e->state == ID_LIVE)
		return fail(r, DEVCACHE_EFORMAT,
			    _("ID %llu is allocated again without a free (allocated at line %llu)"),
			    (unsigned long long)id, (unsigned long long)e->line);
	if ((rc = take_slot(r, &slot)))
		return rc;
	if ((rc = push_event(r, (struct trace_event){.size = size, .slot = slot,
						     .stream = (uint16_t)stream,
						     .op = TRACE_OP_ALLOC}))) {
		give_slot(r->set, slot);
		return rc;
	}
	if (e->state == ID_EMPTY)
		r->ids_used++;
	*e = (struct id_entry){.id = id, .line = r->line_no, .slot = slot, .state = ID_LIVE};
	r->set->streams_used[stream / 8] |= (uint8_t)(1u << (stream % 8));
	if (stream > r->set->max_stream)
		r->set->max_stream = (unsigned)stream;
	return 0;
}

static int free_event(struct reader *r, char **field, size_t n)
{
	struct id_entry *e;
	uint64_t id;
	char q[48];
	int rc;

	if (n < 2)
		return fail(r, DEVCACHE_EFORMAT, _("a free needs an ID: '- ID'"));
	if (n > 2)
		return fail(r, DEVCACHE_EFORMAT, _("unexpected '%s' after the ID: '- ID'"),
			    quote(field[2], q));
	if ((rc = parse_id(r, field[1], &id)))
		return rc;
	e = r->ids ? lookup(r, id) : NULL;
	if (!e || e->state == ID_EMPTY)
		return fail(r, DEVCACHE_EFORMAT, _("free of ID %llu, which was never allocated"),
			    (unsigned long long)id);
	if (e->state == ID_FREED)
		return fail(r, DEVCACHE_EFORMAT,
			    _("free of ID %llu, which was freed already at line %llu"),
			    (unsigned long long)id, (unsigned long long)e->line);
	if ((rc = push_event(r, (struct trace_event){.slot = e->slot, .op = TRACE_OP_FREE})))
		return rc;
	give_slot(r->set, e->slot);
	e->state = ID_FREED;
	e->line = r->line_no;
	return 0;
}

/* One line, without its newline. */
static int parse_line(struct reader *r, char *line, size_t len)
{
	char *field[5], q[48];
	size_t n = 0;

	if (memchr(line, '\0', len))
		return fail(r, DEVCACHE_EFORMAT, _("a NUL byte: this is not a trace file"));
	if (len && line[len - 1] == '\r')
		line[--len] = '\0';
	for (char *p = line + strspn(line, " \t"); *p && n < 5; p += strspn(p, " \t")) {
		field[n++] = p;
		p += strcspn(p, " \t");
		if (*p)
			*p++ = '\0';
	}
	if (n == 0 || field[0][0] == '#')
		return 0;
	if (strcmp(field[0], "+") == 0)
		return alloc_event(r, field, n);
	if (strcmp(field[0], "-") == 0)
		return free_event(r, field, n);
	return fail(r, DEVCACHE_EFORMAT,
		    _("unknown event '%s' (a line is '+ ID SIZE [STREAM]', '- ID', a '#' comment "
		      "or blank)"),
		    quote(field[0], q));
}

/* ---- input -------------------------------------------------------------------------------- */

static int read_error(struct reader *r)
{
	int errnum;
	const char *msg = gzerror(r->gz, &errnum);

	if (errnum == Z_ERRNO) {
		snprintf(r->err, r->err_size, _("%s: read error after line %llu: %s"), r->path,
			 (unsigned long long)r->line_no, strerror(errno));
		return DEVCACHE_EIO;
	}
	if (errnum == Z_MEM_ERROR)
		return out_of_memory(r);
	snprintf(r->err, r->err_size, _("%s: invalid compressed data after line %llu: %s"),
		 r->path, (unsigned long long)r->line_no, msg);
	return DEVCACHE_EFORMAT;
}

/* The next line into line (TRACE_LINE_MAX bytes), without its newline, its
 * length in *len_p.  Returns 1, 0 at the end, or an error. */
static int next_line(struct reader *r, char *line, size_t *len_p)
{
	size_t len = 0;

	for (;;) {
		if (r->pos == r->len) {
			if (r->eof)
				break;
			int n = gzread(r->gz, r->buf, sizeof r->buf), errnum;
			/* Compressed data cut short reads as the end, with the
			 * error kept aside: it must not pass for a whole file. */
			if (n < 0 || (n == 0 && (gzerror(r->gz, &errnum), errnum != Z_OK)))
				return read_error(r);
			r->pos = 0;
			r->len = (size_t)n;
			r->eof = n == 0;
			continue;
		}
		unsigned char *start = r->buf + r->pos;
		unsigned char *nl = memchr(start, '\n', r->len - r->pos);
		size_t n = nl ? (size_t)(nl - start) : r->len - r->pos;

		/* The line and its newline fit TRACE_LINE_MAX; the copy ends
		 * with a NUL where the newline was. */
		if (len + n > TRACE_LINE_MAX - 1) {
			r->line_no++;
			return fail(r, DEVCACHE_EFORMAT, _("line too long (more than %d bytes)"),
				    TRACE_LINE_MAX);
		}
		memcpy(line + len, start, n);
		len += n;
		r->pos += n + (nl != NULL);
		if (nl)
			goto done;
	}
	if (len == 0)
		return 0; /* the end; a last line without a newline counts */
done:
	line[len] = '\0';
	r->line_no++;
	*len_p = len;
	return 1;
}

static int compare_line(const void *a, const void *b)
{
	const struct id_entry *x = a, *y = b;

	return (x->line > y->line) - (x->line < y->line);
}

/* Free, in the order of their allocation, the blocks still live at the end,
 * and hand every slot back for the next file. */
static int free_the_rest(struct reader *r)
{
	struct trace_set *set = r->set;
	size_t n = 0;

	for (size_t i = 0; r->ids && i <= r->ids_mask; i++)
		if (r->ids[i].state == ID_LIVE)
			r->ids[n++] = r->ids[i]; /* compacted in place: the table is done with */
	if (n)
		qsort(r->ids, n, sizeof *r->ids, compare_line);
	for (size_t i = 0; i < n; i++) {
		int rc = push_event(r, (struct trace_event){.slot = r->ids[i].slot,
							    .op = TRACE_OP_FREE,
							    .implicit = 1});
		if (rc)
			return rc;
	}
	set->n_free_slots = 0;
	for (uint32_t s = set->n_slots; s > 0; s--)
		give_slot(set, s - 1);
	return 0;
}

static uint64_t random_seed(void)
{
	uint64_t seed;
	struct timespec ts;

	if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed)
		return seed;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)ts.tv_sec ^
	       (uint64_t)getpid() << 32;
}

/* Anything but a regular file is refused at once: opening a FIFO would
 * wait for a writer, and a device such as /dev/zero would never end.
 * O_NONBLOCK changes nothing for a regular file's reads. */
static int open_file(struct reader *r)
{
	int fd = open(r->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) != 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		snprintf(r->err, r->err_size, "%s: %s", r->path, strerror(e));
		return e == ENOENT ? DEVCACHE_ENOENT : DEVCACHE_EIO;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(r->err, r->err_size, _("%s: not a regular file"), r->path);
		return DEVCACHE_EIO;
	}
	if (!(r->gz = gzdopen(fd, "rb"))) {
		close(fd);
		return out_of_memory(r);
	}
	gzbuffer(r->gz, 1 << 17);
	return 0;
}

static int read_all(struct reader *r)
{
	char *line = malloc(TRACE_LINE_MAX);
	size_t len = 0;
	int rc;

	if (!line)
		return out_of_memory(r);
	while ((rc = next_line(r, line, &len)) == 1)
		if ((rc = parse_line(r, line, len)))
			break;
	free(line);
	return rc ? rc : free_the_rest(r);
}

int trace_set_read(struct trace_set *set, const char *path, char *err, size_t err_size)
{
	struct reader *r = calloc(1, sizeof *r);
	struct trace_file file = {.first = set->n_events};
	int rc;

	if (!r) {
		snprintf(err, err_size, _("%s: out of memory"), path);
		return DEVCACHE_ENOMEM;
	}
	*r = (struct reader){.set = set, .path = path, .err = err, .err_size = err_size,
			     .seed = random_seed()};
	size_t read_before = set->n_events;
	if (!(rc = open_file(r))) {
		rc = read_all(r);
		gzclose(r->gz); /* reading has met every error there is */
	}
	if (!rc) {
		struct trace_file *files = realloc(set->files, (set->n_files + 1) * sizeof *files);

		if (files)
			set->files = files;
		if (!files || !(file.path = strdup(path)))
			rc = out_of_memory(r);
	}
	if (!rc) {
		file.count = set->n_events - file.first;
		file.lines = r->line_no;
		set->files[set->n_files++] = file;
		for (size_t i = file.first; i < set->n_events; i++)
			set->n_read += !set->events[i].implicit;
	} else {
		set->n_events = read_before;
	}
	free(r->ids);
	free(r);
	return rc;
}
