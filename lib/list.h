/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* list.h - the library's doubly linked lists: elements threaded through two pointer fields of their own, NULL at both ends. */
#ifndef DEVCACHE_LIST_H
#define DEVCACHE_LIST_H

/*
 * A list is its first element (head) and, for a DLQ list, its last (tail):
 * lvalues of the element's pointer type, such as seg->first or
 * pool->idle_tail.  Each element links through two of its fields, named by
 * the prev and next arguments, so one element can be on several lists
 * (a block is on its segment's address list and on an idle or hole list).
 *
 * Macros rather than functions over a generic link struct: the lists keep
 * their elements' own types and field names, and the allocator's paths
 * compile to what the open-coded lists they replace did.  head, tail and
 * elm are evaluated more than once: pass plain lvalues.  Removing an
 * element that is not on the list (both links NULL and not the head)
 * leaves the list as it was.
 */

/* Put elm just after at, or first when at (a pointer, not the constant
 * NULL: see DL_PUSH_FRONT) is NULL. */
#define DL_INSERT_AFTER(head, at, elm, prev, next)                                              \
	do {                                                                                    \
		(elm)->prev = (at);                                                             \
		(elm)->next = (at) ? (at)->next : (head);                                       \
		if ((elm)->next)                                                                \
			(elm)->next->prev = (elm);                                              \
		if (at)                                                                         \
			(at)->next = (elm);                                                     \
		else                                                                            \
			(head) = (elm);                                                         \
	} while (0)

#define DL_PUSH_FRONT(head, elm, prev, next)                                                     \
	do {                                                                                    \
		(elm)->prev = NULL;                                                             \
		(elm)->next = (head);                                                           \
		if (head)                                                                       \
			(head)->prev = (elm);                                                   \
		(head) = (elm);                                                                 \
	} while (0)

#define DL_REMOVE(head, elm, prev, next)                                                        \
	do {                                                                                    \
		if ((elm)->prev)                                                                \
			(elm)->prev->next = (elm)->next;                                        \
		else if ((head) == (elm))                                                       \
			(head) = (elm)->next;                                                   \
		if ((elm)->next)                                                                \
			(elm)->next->prev = (elm)->prev;                                        \
		(elm)->prev = (elm)->next = NULL;                                               \
	} while (0)

/* Lists that also keep their last element. */
#define DLQ_PUSH_FRONT(head, tail, elm, prev, next)                                             \
	do {                                                                                    \
		DL_PUSH_FRONT(head, elm, prev, next);                                           \
		if (!(tail))                                                                    \
			(tail) = (elm);                                                         \
	} while (0)

#define DLQ_PUSH_BACK(head, tail, elm, prev, next)                                              \
	do {                                                                                    \
		(elm)->prev = (tail);                                                           \
		(elm)->next = NULL;                                                             \
		if (tail)                                                                       \
			(tail)->next = (elm);                                                   \
		else                                                                            \
			(head) = (elm);                                                         \
		(tail) = (elm);                                                                 \
	} while (0)

#define DLQ_REMOVE(head, tail, elm, prev, next)                                                 \
	do {                                                                                    \
		if (!(elm)->next && (tail) == (elm))                                            \
			(tail) = (elm)->prev;                                                   \
		DL_REMOVE(head, elm, prev, next);                                               \
	} while (0)

#endif
