/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* trace-read.c - reads allocation traces, plain or gzip-compressed, checking every line, into replayable events.
 *
 * A file is streamed in batches of TRACE_BATCH events, so that a trace of
 * a billion lines (a gzip file of a megabyte can hold that many) costs no
 * more memory than one of a thousand.  What is kept from one batch to the
 * next follows the blocks live at once, which are bounded by live_max:
 *   - the ID table maps each live ID to its slot.  A freed ID stays in it,
 *     so that a second free can say where the first one was, until the
 *     table fills with them: it is then rebuilt with the live IDs alone
 *     (at most a quarter of it), and an unknown ID may have been freed
 *     already.  The table is thus at most 8 entries a live block;
 *   - the free slots, one a slot;
 *   - at the end of the file, the live IDs, sorted by the line of their
 *     allocation, freed a batch at a time.
 */
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

struct trace_reader {
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
	char line[TRACE_LINE_MAX];
	/* open addressing, linear probing; the hash is keyed with a random
	 * seed, so a trace cannot be written to make every ID collide */
	struct id_entry *ids;
	size_t ids_mask, ids_used, ids_live;
	bool forgot; /* freed IDs were dropped from the table */
	uint64_t oom_size; /* the line before was "# oom: ... allocate N bytes": N */
	uint64_t seed;
	/* the end of the file: ids[end_pos .. n_end - 1] are still to free */
	bool at_end;
	size_t end_pos, n_end;
};

void trace_set_init(struct trace_set *set)
{
	memset(set, 0, sizeof *set);
	set->live_max = TRACE_LIVE_MAX;
}

static void close_reader(struct trace_set *set)
{
	struct trace_reader *r = set->reader;

	if (!r)
		return;
	if (r->gz)
		gzclose(r->gz); /* reading has met every error there is */
	free(r->ids);
	free(r);
	set->reader = NULL;
}

void trace_set_destroy(struct trace_set *set)
{
	close_reader(set);
	free(set->events);
	free(set->free_slots);
	trace_set_init(set);
}

/* ---- errors ------------------------------------------------------------- */

static int fail(struct trace_reader *r, int code, const char *fmt, ...) DEVCACHE_PRINTF(3, 4);

static int fail(struct trace_reader *r, int code, const char *fmt, ...)
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

static int out_of_memory(struct trace_reader *r)
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

/* The batch has room for it: trace_set_next() reads a line only then. */
static void push_event(struct trace_reader *r, struct trace_event ev)
{
	struct trace_set *set = r->set;

	set->events[set->n_events++] = ev;
	set->n_read += !ev.implicit && ev.op <= TRACE_OP_FREE;
}

/* ---- the ID table ------------------------------------------------------------- */

static uint64_t hash(const struct trace_reader *r, uint64_t id)
{
	uint64_t z = id ^ r->seed;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static struct id_entry *lookup(struct trace_reader *r, uint64_t id)
{
	size_t i = hash(r, id) & r->ids_mask;

	while (r->ids[i].state != ID_EMPTY && r->ids[i].id != id)
		i = (i + 1) & r->ids_mask;
	return &r->ids[i];
}

/* Keep the table at most half full: when it is, twice as large if more
 * than a quarter of it is live, else as large again with the live IDs
 * alone.  Either way the table is at most 8 entries a live ID (or its
 * first 4096), and a rebuild comes after as many insertions as a quarter
 * of the table at least. */
static bool ids_reserve(struct trace_reader *r)
{
	size_t old_size = r->ids ? r->ids_mask + 1 : 0;

	if (r->ids && r->ids_used + 1 <= old_size / 2)
		return true;
	bool compact = old_size && r->ids_live <= old_size / 4;
	size_t size = !old_size ? 4096 : compact ? old_size : old_size * 2;
	if (size == 0 || size > SIZE_MAX / sizeof *r->ids)
		return false;
	struct id_entry *old = r->ids, *ids = calloc(size, sizeof *ids);
	if (!ids)
		return false;
	if (compact && r->ids_used > r->ids_live)
		r->forgot = true;
	r->ids = ids;
	r->ids_mask = size - 1;
	r->ids_used = 0;
	for (size_t i = 0; i < old_size; i++)
		if (old[i].state == ID_LIVE || (old[i].state == ID_FREED && !compact)) {
			*lookup(r, old[i].id) = old[i];
			r->ids_used++;
		}
	free(old);
	return true;
}

/* ---- slots ---------------------------------------------------------------------- */

static int take_slot(struct trace_reader *r, uint32_t *slot_p)
{
	struct trace_set *set = r->set;

	if (set->n_free_slots) {
		*slot_p = set->free_slots[--set->n_free_slots];
		return 0;
	}
	if (r->ids_live >= set->live_max)
		return fail(r, DEVCACHE_EFORMAT, _("more than %u blocks live at once"),
			    (unsigned)set->live_max);
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

static int parse_id(struct trace_reader *r, const char *field, uint64_t *id_p)
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

/* oom_size: N where the line before was "# oom: ... allocate N bytes". */
static int alloc_event(struct trace_reader *r, char **field, size_t n, uint64_t oom_size)
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
	push_event(r, (struct trace_event){.size = size, .slot = slot, .stream = (uint16_t)stream,
					   .op = TRACE_OP_ALLOC, .recorded_oom = oom_size == size});
	r->set->recorded_ooms += oom_size == size;
	if (e->state == ID_EMPTY)
		r->ids_used++;
	r->ids_live++;
	*e = (struct id_entry){.id = id, .line = r->line_no, .slot = slot, .state = ID_LIVE};
	if (!trace_stream_used(r->set, (unsigned)stream)) {
		r->set->streams_used[stream / 8] |= (uint8_t)(1u << (stream % 8));
		r->set->n_streams++;
	}
	if (stream > r->set->max_stream)
		r->set->max_stream = (unsigned)stream;
	return 0;
}

static int free_event(struct trace_reader *r, char **field, size_t n)
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
	if ((!e || e->state == ID_EMPTY) && r->forgot)
		return fail(r, DEVCACHE_EFORMAT,
			    _("free of ID %llu, which was never allocated or was freed already"),
			    (unsigned long long)id);
	if (!e || e->state == ID_EMPTY)
		return fail(r, DEVCACHE_EFORMAT, _("free of ID %llu, which was never allocated"),
			    (unsigned long long)id);
	if (e->state == ID_FREED)
		return fail(r, DEVCACHE_EFORMAT,
			    _("free of ID %llu, which was freed already at line %llu"),
			    (unsigned long long)id, (unsigned long long)e->line);
	push_event(r, (struct trace_event){.slot = e->slot, .op = TRACE_OP_FREE});
	give_slot(r->set, e->slot);
	r->ids_live--;
	e->state = ID_FREED;
	e->line = r->line_no;
	return 0;
}

/* A comment (its text after the '#'): a mark for a caller that asked for
 * them, "warmup-end" or "step N" as the first words, anything after them
 * a remark; otherwise, and without marks, nothing.  A comment that only
 * looks like a mark ("step by step") stays a comment, as it was before
 * there were marks: marks never make a trace fail. */
/* "# device_memory: BYTES" and "# oom: ... allocate N bytes ...": what the
 * header and trace_from_torch say of the traced device. */
static void remark(struct trace_reader *r, const char *text)
{
	struct trace_set *set = r->set;
	const char *p;
	uint64_t n;
	char num[24];
	size_t len;

	if (strncmp(text, "device_memory:", 14) == 0) {
		text += 14 + strspn(text + 14, " \t");
		len = strcspn(text, " \t");
		if (len && len < sizeof num && !set->device_memory) {
			memcpy(num, text, len);
			num[len] = '\0';
			if (parse_number(num, UINT64_MAX, &n) == NUM_OK)
				set->device_memory = n;
		}
	} else if (strncmp(text, "oom:", 4) == 0) {
		set->oom_comments++;
		if ((p = strstr(text, "allocate ")) && (len = strcspn(p + 9, " \t")) &&
		    len < sizeof num) {
			memcpy(num, p + 9, len);
			num[len] = '\0';
			if (parse_number(num, UINT64_MAX, &n) == NUM_OK)
				r->oom_size = n;
		}
	}
}

static void comment(struct trace_reader *r, const char *text)
{
	size_t word;
	uint64_t n;
	char num[24];

	text += strspn(text, " \t");
	remark(r, text);
	if (!r->set->marks)
		return;
	word = strcspn(text, " \t");
	if (word == 10 && memcmp(text, "warmup-end", 10) == 0) {
		push_event(r, (struct trace_event){.op = TRACE_OP_WARMUP_END});
		return;
	}
	if (word != 4 || memcmp(text, "step", 4) != 0)
		return;
	text += word + strspn(text + word, " \t");
	word = strcspn(text, " \t");
	if (word == 0 || word >= sizeof num)
		return;
	memcpy(num, text, word);
	num[word] = '\0';
	if (parse_number(num, UINT64_MAX, &n) == NUM_OK)
		push_event(r, (struct trace_event){.size = n, .op = TRACE_OP_STEP});
}

/* One line, without its newline. */
static int parse_line(struct trace_reader *r, char *line, size_t len)
{
	char *field[5], q[48];
	size_t n = 0;

	if (memchr(line, '\0', len))
		return fail(r, DEVCACHE_EFORMAT, _("a NUL byte: this is not a trace file"));
	if (len && line[len - 1] == '\r')
		line[--len] = '\0';
	char *start = line + strspn(line, " \t");
	uint64_t oom_size = r->oom_size; /* the line before's, for this one only */

	r->oom_size = 0;
	if (*start == '#') {
		comment(r, start + 1);
		return 0;
	}
	for (char *p = start; *p && n < 5; p += strspn(p, " \t")) {
		field[n++] = p;
		p += strcspn(p, " \t");
		if (*p)
			*p++ = '\0';
	}
	if (n == 0)
		return 0;
	if (strcmp(field[0], "+") == 0)
		return alloc_event(r, field, n, oom_size);
	if (strcmp(field[0], "-") == 0)
		return free_event(r, field, n);
	return fail(r, DEVCACHE_EFORMAT,
		    _("unknown event '%s' (a line is '+ ID SIZE [STREAM]', '- ID', a '#' comment "
		      "or blank)"),
		    quote(field[0], q));
}

/* ---- input -------------------------------------------------------------------------------- */

/* gzerror()'s message without the name zlib gives the file: it knows only
 * the descriptor ("<fd:3>: unexpected end of file"), and the message names
 * the file already. */
static const char *zlib_reason(const char *msg)
{
	const char *colon;

	if (msg && strncmp(msg, "<fd:", 4) == 0 && (colon = strstr(msg, ">: ")))
		return colon + 3;
	return msg ? msg : "";
}

static int read_error(struct trace_reader *r)
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
		 r->path, (unsigned long long)r->line_no, zlib_reason(msg));
	return DEVCACHE_EFORMAT;
}

/* The next line into line (TRACE_LINE_MAX bytes), without its newline, its
 * length in *len_p.  Returns 1, 0 at the end, or an error. */
static int next_line(struct trace_reader *r, char *line, size_t *len_p)
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

/* The blocks still live at the end, in the order of their allocation, to
 * free next. */
static void begin_end(struct trace_reader *r)
{
	size_t n = 0;

	for (size_t i = 0; r->ids && i <= r->ids_mask; i++)
		if (r->ids[i].state == ID_LIVE)
			r->ids[n++] = r->ids[i]; /* compacted in place: the table is done with */
	if (n)
		qsort(r->ids, n, sizeof *r->ids, compare_line);
	r->at_end = true;
	r->n_end = n;
	r->end_pos = 0;
}

/* As many of those frees as the batch has room for; once all are done,
 * every slot is handed back for the next file.  Returns whether all are. */
static bool free_the_rest(struct trace_reader *r)
{
	struct trace_set *set = r->set;

	while (r->end_pos < r->n_end && set->n_events < TRACE_BATCH)
		push_event(r, (struct trace_event){.slot = r->ids[r->end_pos++].slot,
						   .op = TRACE_OP_FREE, .implicit = 1});
	if (r->end_pos < r->n_end)
		return false;
	set->n_free_slots = 0;
	for (uint32_t s = set->n_slots; s > 0; s--)
		give_slot(set, s - 1);
	return true;
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
static int open_file(struct trace_reader *r)
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

int trace_set_open(struct trace_set *set, const char *path, char *err, size_t err_size)
{
	struct trace_reader *r;
	int rc;

	close_reader(set); /* only after a failure: the last file was read to its end */
	set->path = path;
	set->first = 0;
	set->lines = 0;
	set->n_events = 0;
	if (!set->events && !(set->events = malloc(TRACE_BATCH * sizeof *set->events))) {
		snprintf(err, err_size, _("%s: out of memory"), path);
		return DEVCACHE_ENOMEM;
	}
	if (!(r = calloc(1, sizeof *r))) {
		snprintf(err, err_size, _("%s: out of memory"), path);
		return DEVCACHE_ENOMEM;
	}
	r->set = set;
	r->path = path;
	r->err = err;
	r->err_size = err_size;
	r->seed = random_seed();
	if ((rc = open_file(r))) {
		free(r);
		return rc;
	}
	set->reader = r;
	return 0;
}

int trace_set_next(struct trace_set *set, char *err, size_t err_size)
{
	struct trace_reader *r = set->reader;
	size_t len = 0;
	int rc = 0;

	set->first += set->n_events;
	set->n_events = 0;
	if (!r)
		return 0;
	r->err = err;
	r->err_size = err_size;
	/* A line gives an event at most: read one only while there is room. */
	while (!r->at_end && set->n_events < TRACE_BATCH) {
		if ((rc = next_line(r, r->line, &len)) == 1)
			rc = parse_line(r, r->line, len);
		else if (rc == 0)
			begin_end(r);
		if (rc)
			break;
	}
	set->lines = r->line_no;
	if (rc)
		return rc;
	if (r->at_end && free_the_rest(r)) {
		close_reader(set);
		set->n_files++;
	}
	return 0;
}
