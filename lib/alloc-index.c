/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* alloc-index.c - the free-block index: free blocks by size, then address, in a list and a red-black tree, for PyTorch's best fit. */
#include "alloc.h"

#define before index_before

/* Put v where u is under u's parent. */
static void replace_child(struct free_index *ix, struct block *u, struct block *v)
{
	if (!u->tp)
		ix->root = v;
	else if (u == u->tp->tl)
		u->tp->tl = v;
	else
		u->tp->tr = v;
	if (v)
		v->tp = u->tp;
}

/* Rotations: x's child on the other side takes x's place, x becomes its
 * child on this side. */
static void rotate_left(struct free_index *ix, struct block *x)
{
	struct block *y = x->tr;

	x->tr = y->tl;
	if (y->tl)
		y->tl->tp = x;
	replace_child(ix, x, y);
	y->tl = x;
	x->tp = y;
}

static void rotate_right(struct free_index *ix, struct block *x)
{
	struct block *y = x->tl;

	x->tl = y->tr;
	if (y->tr)
		y->tr->tp = x;
	replace_child(ix, x, y);
	y->tr = x;
	x->tp = y;
}

static bool is_red(const struct block *b)
{
	return b && b->red;
}

void index_init(struct free_index *ix)
{
	memset(ix, 0, sizeof *ix);
	ix->end.fprev = ix->end.fnext = &ix->end;
	ix->end.size = SIZE_MAX;
}

/* The tree over the count blocks of the list from *next on, balanced:
 * the nodes on the one level that may be incomplete are red, the others
 * black, so every path has the same number of black nodes. */
static struct block *build(struct block **next, size_t count, unsigned depth, unsigned red_depth)
{
	if (!count)
		return NULL;
	struct block *l = build(next, (count - 1) / 2, depth + 1, red_depth), *b = *next;

	*next = b->fnext;
	b->tl = l;
	b->tr = build(next, count - 1 - (count - 1) / 2, depth + 1, red_depth);
	b->red = depth == red_depth;
	if (l)
		l->tp = b;
	if (b->tr)
		b->tr->tp = b;
	return b;
}

/* The list has grown past INDEX_LIST_MAX: it gets its tree. */
void index_build_tree(struct free_index *ix)
{
	struct block *next = ix->end.fnext;
	unsigned full = 0; /* complete levels: floor(log2(count + 1)) */

	while (((size_t)2 << full) - 1 <= ix->count)
		full++;
	ix->root = build(&next, ix->count, 0, full);
	ix->root->tp = NULL;
}

/* In the tree, b goes under the block it descends to; the list's links
 * follow from the descent: b goes before the last block it went left
 * of. */
void index_tree_insert(struct free_index *ix, struct block *b)
{
	struct block *p = NULL, *succ = &ix->end, **link = &ix->root;

	while (*link) {
		p = *link;
		if (index_before(b, p)) {
			succ = p;
			link = &p->tl;
		} else {
			link = &p->tr;
		}
	}
	index_link(b, succ);
	b->tp = p;
	b->tl = b->tr = NULL;
	b->red = true;
	*link = b;
	/* A red node under a red parent: recolour while the uncle is red,
	 * else one or two rotations end it. */
	while ((p = b->tp) && p->red) {
		struct block *g = p->tp, *u;

		if (p == g->tl) {
			u = g->tr;
			if (is_red(u)) {
				p->red = u->red = false;
				g->red = true;
				b = g;
				continue;
			}
			if (b == p->tr) {
				rotate_left(ix, p);
				b = p;
				p = b->tp;
			}
			p->red = false;
			g->red = true;
			rotate_right(ix, g);
		} else {
			u = g->tl;
			if (is_red(u)) {
				p->red = u->red = false;
				g->red = true;
				b = g;
				continue;
			}
			if (b == p->tl) {
				rotate_right(ix, p);
				b = p;
				p = b->tp;
			}
			p->red = false;
			g->red = true;
			rotate_left(ix, g);
		}
	}
	ix->root->red = false;
}

/* Restore the black height after a black node left the tree above x
 * (which may be empty: xp is its parent). */
static void remove_fixup(struct free_index *ix, struct block *x, struct block *xp)
{
	while (x != ix->root && !is_red(x)) {
		struct block *w;

		if (x == xp->tl) {
			w = xp->tr;
			if (w->red) {
				w->red = false;
				xp->red = true;
				rotate_left(ix, xp);
				w = xp->tr;
			}
			if (!is_red(w->tl) && !is_red(w->tr)) {
				w->red = true;
				x = xp;
				xp = x->tp;
				continue;
			}
			if (!is_red(w->tr)) {
				w->tl->red = false;
				w->red = true;
				rotate_right(ix, w);
				w = xp->tr;
			}
			w->red = xp->red;
			xp->red = false;
			w->tr->red = false;
			rotate_left(ix, xp);
		} else {
			w = xp->tl;
			if (w->red) {
				w->red = false;
				xp->red = true;
				rotate_right(ix, xp);
				w = xp->tl;
			}
			if (!is_red(w->tl) && !is_red(w->tr)) {
				w->red = true;
				x = xp;
				xp = x->tp;
				continue;
			}
			if (!is_red(w->tl)) {
				w->tr->red = false;
				w->red = true;
				rotate_left(ix, w);
				w = xp->tl;
			}
			w->red = xp->red;
			xp->red = false;
			w->tl->red = false;
			rotate_right(ix, xp);
		}
		x = ix->root;
	}
	if (x)
		x->red = false;
}

static void tree_remove(struct free_index *ix, struct block *b)
{
	struct block *x, *xp;
	bool removed_red = b->red;

	if (!b->tl || !b->tr) {
		x = b->tl ? b->tl : b->tr;
		xp = b->tp;
		replace_child(ix, b, x);
	} else {
		/* Two children: b's successor takes its place and colour. */
		struct block *y = b->fnext;

		removed_red = y->red;
		x = y->tr;
		if (y->tp == b) {
			xp = y;
		} else {
			xp = y->tp;
			replace_child(ix, y, y->tr);
			y->tr = b->tr;
			y->tr->tp = y;
		}
		replace_child(ix, b, y);
		y->tl = b->tl;
		y->tl->tp = y;
		y->red = b->red;
	}
	if (!removed_red)
		remove_fixup(ix, x, xp);
}

void index_tree_remove(struct free_index *ix, struct block *b)
{
	/* Under INDEX_LIST_MIN the list alone serves: the tree is dropped
	 * as it is. */
	if (ix->count < INDEX_LIST_MIN)
		ix->root = NULL;
	else
		tree_remove(ix, b);
}

/* The size of the largest free block, for the fragmentation figure. */
size_t index_largest(const struct free_index *ix)
{
	const struct block *b = index_last(ix);

	return b ? b->size : 0;
}

/* In the tree, b leaves and comes back where its key now puts it; the
 * count and the version stay. */
void index_tree_move(struct free_index *ix, struct block *b)
{
	tree_remove(ix, b);
	index_unlink(b);
	index_tree_insert(ix, b);
}
