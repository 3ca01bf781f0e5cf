/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* pypickle.c - a linear walk over a pickle's opcodes that bounds what unpickling it can cost.
 *
 * devcache.trace_from_torch reads PyTorch memory snapshots, which are
 * pickles, with an unpickler that refuses every class and function.  What
 * it cannot refuse is the price of the plain opcodes: CPython's unpickler
 * sizes its memo from the largest index a PUT names, and zero-fills it, so
 * a 10-byte file saying LONG_BINPUT 2**30 costs 16 GiB and a minute; and a
 * FRAME or a length-prefixed string may claim more bytes than the file
 * has.  This walk runs first, at the speed of memory (pickletools.genops
 * would do the same at a few microseconds an opcode, longer than the load
 * itself for a snapshot of millions of opcodes), and refuses those.
 *
 * It also follows the unpickler's stack, to refuse a pickle that builds
 * more objects than max_objects, or objects nested deeper than max_depth:
 * CPython hashes a tuple (a dict key, a set member) by recursing into its
 * items with no check, so a 150 KB pickle of a tuple nested 150,000 deep
 * used as a dict key kills the process.  Every value the pickle makes
 * counts as an object; a container is one deeper than its deepest item,
 * as its items are when it is built or filled.  A list filled after it was
 * put in another is not counted again in that one: only hashing recurses
 * without a check, and hashing stops at a list (tuples and frozensets are
 * built whole, from items whose depth is known then).  The walk's memory is
 * a few bytes an opcode.
 *
 * It checks nothing else: where the unpickler would fail (a stack
 * underflow, a class to find, an unknown memo index) the walk stops, and
 * the unpickler says why.  The opcodes and their arguments are those of
 * the pickle format, protocols 0 to 5, as Lib/pickletools.py documents
 * them, and their effect on the stack is CPython's (Modules/_pickle.c).
 */
#include "pydevcache.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum arg {
	A_NONE,  /* no argument */
	A_FIX,   /* n bytes */
	A_LEN,   /* an n-byte little-endian length, then that many bytes */
	A_LINE,  /* text up to a newline */
	A_LINE2, /* two such lines (GLOBAL, INST) */
};

struct opcode {
	enum arg arg;
	unsigned char n;
};

/* Indexed by opcode byte; arg A_NONE with n 1 marks an opcode with no
 * argument, n 0 a byte that is no opcode. */
static const struct opcode *opcode(unsigned char c)
{
	static const struct opcode none = {A_NONE, 1}, fix1 = {A_FIX, 1}, fix2 = {A_FIX, 2},
				   fix4 = {A_FIX, 4}, fix8 = {A_FIX, 8}, len1 = {A_LEN, 1},
				   len4 = {A_LEN, 4}, len8 = {A_LEN, 8}, line = {A_LINE, 1},
				   line2 = {A_LINE2, 1};

	switch (c) {
	case 'I': case 'L': case 'S': case 'V': case 'F': case 'g': case 'p': case 'P':
		return &line;
	case 'c': case 'i':
		return &line2;
	case 'J': case 'j': case 'r': case 0x84:
		return &fix4;
	case 'K': case 'h': case 'q': case 0x80: case 0x82:
		return &fix1;
	case 'M': case 0x83:
		return &fix2;
	case 'G': case 0x95:
		return &fix8;
	case 0x8a: case 'U': case 'C': case 0x8c:
		return &len1;
	case 0x8b: case 'T': case 'B': case 'X':
		return &len4;
	case 0x8e: case 0x8d: case 0x96:
		return &len8;
	case 'N': case 0x88: case 0x89: case 0x97: case 0x98: case ']': case 'a': case 'e':
	case 'l': case ')': case 't': case 0x85: case 0x86: case 0x87: case '}': case 'd':
	case 's': case 'u': case 0x8f: case 0x90: case 0x91: case '0': case '2': case '(':
	case '1': case 0x94: case 0x93: case 'R': case 'b': case 'o': case 0x81: case 0x92:
	case '.': case 'Q':
		return &none;
	default:
		return NULL;
	}
}

static uint64_t little_endian(const unsigned char *p, unsigned n)
{
	uint64_t v = 0;

	for (unsigned i = n; i-- > 0;)
		v = v << 8 | p[i];
	return v;
}

/* ---- the unpickler's stack ------------------------------------------------------ */

/* An object is an ID: 0 for any value that holds no other (a number, a
 * string, None), or the number of a container, whose depth is kept. */
struct walk {
	uint32_t *stack;
	size_t n_stack, cap_stack;
	size_t *marks; /* the stack's length at each MARK */
	size_t n_marks, cap_marks;
	uint32_t *memo; /* by memo index: the object's ID + 1, 0 for none */
	size_t cap_memo, memo_len;
	uint32_t *depth; /* by container ID; [0] is 0 */
	size_t n_depth, cap_depth;
	size_t objects, max_objects;
	uint32_t max_depth;
	bool no_memory;
};

enum step { GO_ON, STOP, TOO_MANY, TOO_DEEP };

/* Room for one more element in *array (count used of *cap). */
static bool room(struct walk *w, void **array, size_t *cap, size_t count, size_t elem)
{
	if (count < *cap)
		return true;
	size_t n = *cap ? *cap * 2 : 256;
	void *p = n > SIZE_MAX / elem ? NULL : PyMem_Realloc(*array, n * elem);

	if (!p) {
		w->no_memory = true;
		return false;
	}
	*array = p;
	*cap = n;
	return true;
}

static enum step push(struct walk *w, uint32_t id)
{
	if (!room(w, (void **)&w->stack, &w->cap_stack, w->n_stack, sizeof *w->stack))
		return STOP;
	w->stack[w->n_stack++] = id;
	return GO_ON;
}

/* A value new to the pickle: a scalar, or a container of depth depth. */
static enum step make(struct walk *w, uint32_t depth, bool container)
{
	if (++w->objects > w->max_objects)
		return TOO_MANY;
	if (!container)
		return push(w, 0);
	if (depth > w->max_depth)
		return TOO_DEEP;
	if (w->n_depth == UINT32_MAX ||
	    !room(w, (void **)&w->depth, &w->cap_depth, w->n_depth, sizeof *w->depth))
		return STOP;
	w->depth[w->n_depth] = depth;
	return push(w, (uint32_t)w->n_depth++);
}

/* Where the items above the last MARK start: the fence below which
 * nothing may be popped. */
static size_t fence(const struct walk *w)
{
	return w->n_marks ? w->marks[w->n_marks - 1] : 0;
}

/* The deepest of the items from stack[from] up. */
static uint32_t deepest(const struct walk *w, size_t from)
{
	uint32_t d = 0;

	for (size_t i = from; i < w->n_stack; i++)
		if (w->depth[w->stack[i]] > d)
			d = w->depth[w->stack[i]];
	return d;
}

/* The items from stack[from] up go into a new container, which replaces
 * them (from == n_stack: an empty one). */
static enum step build(struct walk *w, size_t from)
{
	uint32_t d = deepest(w, from);

	w->n_stack = from;
	return make(w, d + 1, true);
}

/* The items from stack[from] up go into the container below them. */
static enum step fill(struct walk *w, size_t from)
{
	uint32_t d = deepest(w, from), c = w->stack[from - 1];

	w->n_stack = from;
	if (c != 0 && d + 1 > w->depth[c]) { /* a scalar: the unpickler refuses, or adds no depth */
		if (d + 1 > w->max_depth)
			return TOO_DEEP;
		w->depth[c] = d + 1;
	}
	return GO_ON;
}

/* The position of the last MARK, popped; SIZE_MAX when there is none. */
static size_t pop_mark(struct walk *w)
{
	return w->n_marks ? w->marks[--w->n_marks] : SIZE_MAX;
}

static enum step memo_put(struct walk *w, uint64_t index)
{
	if (w->n_stack <= fence(w))
		return STOP;
	if (index >= w->cap_memo) {
		size_t n = w->cap_memo ? w->cap_memo : 256;

		while (n <= index)
			n *= 2; /* index is below the opcodes read: this is bounded */
		uint32_t *p = n > SIZE_MAX / sizeof *p ? NULL : PyMem_Realloc(w->memo, n * sizeof *p);
		if (!p) {
			w->no_memory = true;
			return STOP;
		}
		memset(p + w->cap_memo, 0, (n - w->cap_memo) * sizeof *p);
		w->memo = p;
		w->cap_memo = n;
	}
	w->memo_len += w->memo[index] == 0;
	w->memo[index] = w->stack[w->n_stack - 1] + 1;
	return GO_ON;
}

static enum step memo_get(struct walk *w, uint64_t index)
{
	if (index >= w->cap_memo || w->memo[index] == 0)
		return STOP;
	return push(w, w->memo[index] - 1);
}

/* The effect of opcode c (its argument n, for the memo) on the stack. */
static enum step step(struct walk *w, unsigned char c, uint64_t n)
{
	size_t len = w->n_stack, top = fence(w), mark;

	switch (c) {
	/* values that hold no other */
	case 'I': case 'L': case 'S': case 'V': case 'F': case 'J': case 'K': case 'M':
	case 0x8a: case 0x8b: case 'U': case 'T': case 'X': case 0x8c: case 0x8d: case 0x8e:
	case 'C': case 'B': case 0x96: case 'G': case 'N': case 0x88: case 0x89:
		return make(w, 0, false);
	/* empty containers */
	case ']': case ')': case '}': case 0x8f:
		return build(w, len);
	case '(':
		if (!room(w, (void **)&w->marks, &w->cap_marks, w->n_marks, sizeof *w->marks))
			return STOP;
		w->marks[w->n_marks++] = len;
		return GO_ON;
	/* LIST, TUPLE, DICT, FROZENSET: the items above the MARK */
	case 'l': case 't': case 'd': case 0x91:
		return (mark = pop_mark(w)) == SIZE_MAX ? STOP : build(w, mark);
	case 0x85: case 0x86: case 0x87: /* TUPLE1, TUPLE2, TUPLE3 */
		return len - top < (size_t)(c - 0x84) ? STOP : build(w, len - (c - 0x84));
	case 'a': /* APPEND */
		return len - top < 2 ? STOP : fill(w, len - 1);
	case 's': /* SETITEM */
		return len - top < 3 ? STOP : fill(w, len - 2);
	case 'e': case 'u': case 0x90: /* APPENDS, SETITEMS, ADDITEMS */
		if ((mark = pop_mark(w)) == SIZE_MAX || mark <= fence(w))
			return STOP;
		return fill(w, mark);
	case '0': /* POP: an item, else the MARK */
		if (len > top)
			w->n_stack--;
		else if (pop_mark(w) == SIZE_MAX)
			return STOP;
		return GO_ON;
	case '1': /* POP_MARK */
		if ((mark = pop_mark(w)) == SIZE_MAX)
			return STOP;
		w->n_stack = mark;
		return GO_ON;
	case '2': /* DUP */
		return len > top ? push(w, w->stack[len - 1]) : STOP;
	case 'b': /* BUILD: the state is set on the object below it, which a
		   * plain value takes only when it is None */
		if (len - top < 2)
			return STOP;
		w->n_stack--;
		return GO_ON;
	case 'p': case 'q': case 'r':
		return memo_put(w, n);
	case 0x94: /* MEMOIZE */
		return memo_put(w, w->memo_len);
	case 'g': case 'h': case 'j':
		return memo_get(w, n);
	case 0x80: case 0x95: case 0x98: /* PROTO, FRAME, READONLY_BUFFER */
		return len > top || c != 0x98 ? GO_ON : STOP;
	default:
		/* a class or function to find, a persistent ID, an out-of-band
		 * buffer: the unpickler refuses them */
		return STOP;
	}
}

static void walk_free(struct walk *w)
{
	PyMem_Free(w->stack);
	PyMem_Free(w->marks);
	PyMem_Free(w->memo);
	PyMem_Free(w->depth);
}

/* ---- the entry point ------------------------------------------------------------ */

/* _check_pickle(data, max_depth, max_objects) -> None, or (kind, message):
 * kind "cut" for a pickle cut short, "damaged" for one that would cost
 * more than its size, "deep" or "large" for one past a bound. */
PyObject *pdc_check_pickle(PyObject *self, PyObject *args)
{
	Py_buffer view;
	unsigned int max_depth;
	Py_ssize_t max_objects;
	(void)self;

	if (!PyArg_ParseTuple(args, "y*In:_check_pickle", &view, &max_depth, &max_objects))
		return NULL;
	if (max_objects < 0 || max_depth > UINT32_MAX - 1) {
		PyBuffer_Release(&view);
		PyErr_SetString(PyExc_ValueError, "_check_pickle: a bound out of range");
		return NULL;
	}
	const unsigned char *p = view.buf;
	size_t size = (size_t)view.len, at = 0, ops = 0;
	struct walk w = {.max_depth = max_depth, .max_objects = (size_t)max_objects};
	const char *kind = NULL;
	bool walking = true;
	char why[160] = "";

	/* container ID 0 stands for the scalars, of depth 0 */
	if (!room(&w, (void **)&w.depth, &w.cap_depth, 0, sizeof *w.depth)) {
		PyBuffer_Release(&view);
		return PyErr_NoMemory();
	}
	w.depth[w.n_depth++] = 0;
	while (at < size) {
		size_t start = at;
		unsigned char c = p[at++];
		const struct opcode *op = opcode(c);
		uint64_t n = 0;

		ops++;
		if (!op)
			break; /* not an opcode: the unpickler says so */
		if (c == '.')
			break; /* STOP: the rest is not read */
		switch (op->arg) {
		case A_NONE:
			break;
		case A_FIX:
		case A_LEN:
			if (size - at < op->n) {
				kind = "cut";
				break;
			}
			n = little_endian(p + at, op->n);
			at += op->n;
			if (op->arg == A_LEN || c == 0x95) { /* FRAME: a length too */
				if (n > size - at) {
					kind = "cut";
					snprintf(why, sizeof why,
						 "byte %zu: %llu bytes announced, %zu left in the file",
						 start, (unsigned long long)n, size - at);
					break;
				}
				if (op->arg == A_LEN)
					at += n;
			}
			break;
		case A_LINE:
		case A_LINE2:
			for (int lines = op->arg == A_LINE ? 1 : 2; lines > 0 && !kind; lines--) {
				const unsigned char *nl = memchr(p + at, '\n', size - at);

				if (!nl)
					kind = "cut";
				else if (c == 'p' || c == 'g') {
					/* PUT, GET: a decimal memo index */
					n = 0;
					for (const unsigned char *d = p + at; d < nl && n <= size; d++)
						n = *d >= '0' && *d <= '9' ? n * 10 + (uint64_t)(*d - '0')
									   : n;
				}
				if (nl)
					at = (size_t)(nl - p) + 1;
			}
			break;
		}
		if (kind)
			break;
		/* PUT, BINPUT, LONG_BINPUT: the unpickler's memo grows to twice the
		 * index.  A pickler numbers its memo entries from 0, one per object,
		 * and an object takes an opcode at least: no valid index reaches
		 * the number of opcodes before it. */
		if ((c == 'p' || c == 'q' || c == 'r') && n >= ops) {
			kind = "damaged";
			snprintf(why, sizeof why,
				 "byte %zu: memo index %llu, where a pickle of this size has at most %zu",
				 start, (unsigned long long)n, ops);
			break;
		}
		switch (walking ? step(&w, c, n) : STOP) {
		case GO_ON:
			break;
		case STOP:
			walking = false;
			break;
		case TOO_MANY:
			kind = "large";
			snprintf(why, sizeof why, "more than %zu objects (byte %zu)", w.max_objects,
				 start);
			break;
		case TOO_DEEP:
			kind = "deep";
			snprintf(why, sizeof why, "objects nested more than %u deep (byte %zu)",
				 (unsigned)w.max_depth, start);
			break;
		}
		if (kind || w.no_memory)
			break;
	}
	walk_free(&w);
	PyBuffer_Release(&view);
	if (w.no_memory)
		return PyErr_NoMemory();
	if (!kind)
		Py_RETURN_NONE;
	if (!why[0])
		snprintf(why, sizeof why, "the file ends at byte %zu", size);
	return Py_BuildValue("(ss)", kind, why);
}
