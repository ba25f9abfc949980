/*
 * _sendmany: write one payload to many sockets in one call, without the GIL.
 *
 * Why native: fanning one frame out to 4,200 terminals runs the per-connection Python work
 * (loop, attribute reads, transport call, bookkeeping) 100,000+ times a second; a prototype
 * of this loop inside bench_fanout cost 8.0-8.8 us per delivered frame where the bare Python
 * `transport.write` floor cost 10.0-10.9 in the same runs (docs/benchmarks.md, issue 13).
 *
 * send_many(payload, fds, /) -> None | list[tuple[int, int, int]]
 *
 *   payload  a bytes-like object, or a sequence of them sent as one iovec (header + record
 *            chunks need not be joined); at most MAX_CHUNKS pieces.
 *   fds      a sequence of socket file descriptors (ints >= 0), all validated before any send.
 *
 * One non-blocking send/sendmsg per descriptor (MSG_DONTWAIT | MSG_NOSIGNAL: a vanished peer is
 * an errno, never a SIGPIPE), EINTR retried. The result is None when every socket took every
 * byte, so the common case costs the caller no Python work; otherwise a list, in fd order, of
 * (index, sent, errno) for the sockets that fell short:
 *   (i, n, 0)       partial: the first n bytes were queued, the rest must follow
 *   (i, 0, EAGAIN)  would block: nothing was queued
 *   (i, 0, errno)   the send failed (EPIPE, ECONNRESET, EBADF, ...)
 * An empty payload sends nothing and returns None.
 *
 * Every buffer is held (PyObject_GetBuffer) and the descriptors copied into C memory before
 * the GIL is released, so another thread can neither resize a bytearray nor mutate the fd list
 * under the loop. The caller must not close a descriptor of the list from another thread
 * during the call (the usual rule for any fd handed to a system call).
 *
 * SendTable (below) is the writer's frame path: its terminals as C entries (fd, flags, counts),
 * one send() per entry of a payload group whose flags are clear.
 *
 * The pure-Python twins with the same behaviour are in monotape/platform/server/sendmany.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>
#include <limits.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Linux's UIO_MAXIOV; a larger iovec is EMSGSIZE from the kernel, so refuse it up front. */
#define MAX_CHUNKS 1024
#define SEND_FLAGS (MSG_DONTWAIT | MSG_NOSIGNAL)
/* Small payloads (the common case: one framed payload) need no heap for their buffer views. */
#define STACK_CHUNKS 8

typedef struct {
    Py_ssize_t index;
    Py_ssize_t sent;
    int err;
} shortfall;

static void
release_views(Py_buffer *views, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        PyBuffer_Release(&views[i]);
    }
}

/* Fill views[0..count) from the payload; on failure release what was taken and return -1. */
static int
hold_payload(PyObject *payload, Py_buffer *views, Py_ssize_t count, int single)
{
    if (single) {
        return PyObject_GetBuffer(payload, &views[0], PyBUF_SIMPLE);
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *chunk = PySequence_Fast_GET_ITEM(payload, i);
        if (PyObject_GetBuffer(chunk, &views[i], PyBUF_SIMPLE) < 0) {
            release_views(views, i);
            return -1;
        }
    }
    return 0;
}

/* Copy the descriptors into fds[0..n); -1 with an exception set on a bad one. An item that is
   not an exact int runs its own __index__, which may change the caller's list under us: hold
   the item while it runs and check the length before reading the next one. */
static int
copy_fds(PyObject *seq, int *fds, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PySequence_Fast_GET_SIZE(seq) != n) {
            PyErr_SetString(PyExc_RuntimeError, "fds changed size while being read");
            return -1;
        }
        PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        long fd = PyLong_AsLong(item);
        Py_DECREF(item);
        if (fd == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (fd < 0) {
            PyErr_SetString(PyExc_ValueError, "negative file descriptor");
            return -1;
        }
        if (fd > INT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "file descriptor out of range");
            return -1;
        }
        fds[i] = (int)fd;
    }
    return 0;
}

static PyObject *
build_result(const shortfall *rec, Py_ssize_t count)
{
    PyObject *list = PyList_New(count);
    if (list == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *item = Py_BuildValue("(nni)", rec[k].index, rec[k].sent, rec[k].err);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, item);
    }
    return list;
}

static PyObject *
send_many(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *payload;
    PyObject *result = NULL;
    PyObject *chunks = NULL; /* the chunks, when the payload is a sequence of them */
    PyObject *fd_seq = NULL;
    Py_buffer stack_views[STACK_CHUNKS];
    Py_buffer *views = stack_views;
    struct iovec stack_iov[STACK_CHUNKS];
    struct iovec *iov = stack_iov;
    void *block = NULL; /* shortfall records then fds: one raw allocation */
    shortfall *rec;
    int *fds;
    struct msghdr msg;
    Py_ssize_t nchunks = 1;
    Py_ssize_t n;
    Py_ssize_t failed = 0;
    size_t total = 0;
    int single;
    int held = 0;

    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "send_many() takes exactly 2 arguments (%zd given)", nargs);
        return NULL;
    }
    payload = args[0];
    single = PyObject_CheckBuffer(payload);
    if (!single) {
        /* The same list/tuple (new reference), or the chunks copied from another sequence;
           the held views keep each chunk alive even if another thread empties the caller's
           list while the GIL is released. */
        chunks = PySequence_Fast(payload,
                                 "payload must be a bytes-like object or a sequence of them");
        if (chunks == NULL) {
            return NULL;
        }
        nchunks = PySequence_Fast_GET_SIZE(chunks);
        if (nchunks > MAX_CHUNKS) {
            PyErr_Format(PyExc_ValueError, "payload has %zd chunks, at most %d are allowed",
                         nchunks, MAX_CHUNKS);
            goto done;
        }
        if (nchunks > STACK_CHUNKS) {
            views = PyMem_Malloc((size_t)nchunks * sizeof(Py_buffer));
            iov = PyMem_Malloc((size_t)nchunks * sizeof(struct iovec));
            if (views == NULL || iov == NULL) {
                PyErr_NoMemory();
                goto done;
            }
        }
    }
    if (hold_payload(single ? payload : chunks, views, nchunks, single) < 0) {
        goto done;
    }
    held = 1;
    for (Py_ssize_t c = 0; c < nchunks; c++) {
        /* Each view is at most PY_SSIZE_T_MAX; the sum of up to 1,024 of them fits a size_t
           but not always a ssize_t, which is what send() can report. */
        total += (size_t)views[c].len;
        iov[c].iov_base = views[c].buf;
        iov[c].iov_len = (size_t)views[c].len;
    }
    if (total > (size_t)PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "payload larger than PY_SSIZE_T_MAX bytes");
        goto done;
    }

    fd_seq = PySequence_Fast(args[1], "fds must be a sequence of file descriptors");
    if (fd_seq == NULL) {
        goto done;
    }
    n = PySequence_Fast_GET_SIZE(fd_seq);
    if (n == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if ((size_t)n > ((size_t)PY_SSIZE_T_MAX) / (sizeof(shortfall) + sizeof(int))) {
        PyErr_NoMemory();
        goto done;
    }
    /* Raw: the loop below writes the records without the GIL. Records first, they need the
       stricter alignment. */
    block = PyMem_RawMalloc((size_t)n * (sizeof(shortfall) + sizeof(int)));
    if (block == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    rec = (shortfall *)block;
    fds = (int *)(rec + n);
    /* Every descriptor is validated before the first send, so a bad one sends to nobody. */
    if (copy_fds(fd_seq, fds, n) < 0) {
        goto done;
    }
    if (total == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }

    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = (size_t)nchunks;

    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        ssize_t r;
        do {
            r = nchunks == 1 ? send(fds[i], iov[0].iov_base, iov[0].iov_len, SEND_FLAGS)
                             : sendmsg(fds[i], &msg, SEND_FLAGS);
        } while (r < 0 && errno == EINTR);
        if (r >= 0 && (size_t)r == total) {
            continue;
        }
        rec[failed].index = i;
        rec[failed].sent = r < 0 ? 0 : (Py_ssize_t)r;
        rec[failed].err = r < 0 ? errno : 0;
        failed++;
    }
    Py_END_ALLOW_THREADS

    result = failed == 0 ? Py_NewRef(Py_None) : build_result(rec, failed);

done:
    if (held) {
        release_views(views, nchunks);
    }
    if (views != stack_views) {
        PyMem_Free(views);
    }
    if (iov != stack_iov) {
        PyMem_Free(iov);
    }
    PyMem_RawFree(block);
    Py_XDECREF(fd_seq);
    Py_XDECREF(chunks);
    return result;
}

/* The errno of a SendTable.send shortfall that was not sent (a removed handle or a flag set):
   the writer's ordered Python path takes that terminal. */
#define NOT_ELIGIBLE (-1)

/* SendTable: the writer's terminals as C entries, so a frame's pass touches no Python object.

   Why: the pass this replaced (send_group, over the connection objects) read each connection,
   its slots, its fd's int and its transport (two method calls) and counted on Python ints, all
   cold by the time a frame reached them: at 4,200 terminals ~1.8 us per frame above the
   kernel's send, where the target leaves ~0.6 (docs/benchmarks.md, issue 13). Here each
   terminal is one 32-byte entry: the table's own duplicate of its socket, a generation, the
   reasons it may not be sent to behind its transport's back (flags, kept by Python on every
   change: server/connection.py), and its frame and byte counts. A payload group is an int64
   array of handles (generation << 32 | slot), so a send reads that array and the entries.

   The duplicate is what makes a stale entry harmless: while the entry lives the fd number stays
   ours, so the kernel cannot hand it to a newer connection even after the transport closed its
   own (the transport's close releases the socket only once the entry goes too: at the
   protocol's connection_lost, or the connection's teardown). A removed entry's generation moves on, so a group built before the
   removal meets a stale handle and reports it not eligible, never another terminal's socket.

   One thread: add and remove refuse to run while a send (GIL released) is in progress. */
#define FLAG_CLOSING 1u
#define FLAG_NOT_OPEN 2u
#define FLAG_BEHIND 4u
#define FLAG_QUEUED 8u
#define ALL_FLAGS (FLAG_CLOSING | FLAG_NOT_OPEN | FLAG_BEHIND | FLAG_QUEUED)
#define MAX_SLOTS (1u << 30)

typedef struct {
    int fd; /* the table's duplicate; -1: a free slot */
    uint32_t gen;
    uint32_t flags;
    uint32_t pad_;
    int64_t frames;
    int64_t bytes;
} entry;

typedef struct {
    PyObject_HEAD
    entry *slots;
    uint32_t *free_slots; /* a stack of free slot numbers */
    uint32_t cap, used, nfree, live;
    int sending;
} SendTable;

static entry *
entry_of(SendTable *t, long long handle)
{
    if (handle < 0) {
        return NULL;
    }
    uint32_t slot = (uint32_t)(handle & 0xffffffffLL);
    uint32_t gen = (uint32_t)((unsigned long long)handle >> 32);
    if (slot >= t->used) {
        return NULL;
    }
    entry *e = &t->slots[slot];
    return e->fd >= 0 && e->gen == gen ? e : NULL;
}

static entry *
live_entry(SendTable *t, PyObject *arg)
{
    long long handle = PyLong_AsLongLong(arg);
    if (handle == -1 && PyErr_Occurred()) {
        return NULL;
    }
    entry *e = entry_of(t, handle);
    if (e == NULL) {
        PyErr_Format(PyExc_KeyError, "no terminal with handle %lld", handle);
    }
    return e;
}

static int
not_busy(SendTable *t)
{
    if (t->sending) {
        PyErr_SetString(PyExc_RuntimeError, "a send is in progress on this table");
        return -1;
    }
    return 0;
}

static PyObject *
table_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwds != NULL && PyDict_GET_SIZE(kwds) != 0)) {
        PyErr_SetString(PyExc_TypeError, "SendTable() takes no arguments");
        return NULL;
    }
    SendTable *t = (SendTable *)type->tp_alloc(type, 0);
    return (PyObject *)t; /* every field zero: no slots yet */
}

static void
table_dealloc(SendTable *t)
{
    for (uint32_t s = 0; s < t->used; s++) {
        if (t->slots[s].fd >= 0) {
            close(t->slots[s].fd);
        }
    }
    PyMem_Free(t->slots);
    PyMem_Free(t->free_slots);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *
table_add(SendTable *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "add() takes exactly 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (not_busy(t) < 0) {
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    if (fd == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (fd < 0 || fd > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "file descriptor out of range");
        return NULL;
    }
    unsigned long flags = PyLong_AsUnsignedLong(args[1]);
    if (flags == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    if (flags & ~(unsigned long)ALL_FLAGS) {
        PyErr_SetString(PyExc_ValueError, "unknown flag bits");
        return NULL;
    }
    uint32_t slot;
    if (t->nfree == 0 && t->used == t->cap) {
        if (t->cap >= MAX_SLOTS) {
            PyErr_SetString(PyExc_OverflowError, "send table full");
            return NULL;
        }
        uint32_t cap = t->cap ? t->cap * 2 : 64;
        entry *slots = PyMem_Realloc(t->slots, (size_t)cap * sizeof(entry));
        if (slots == NULL) {
            return PyErr_NoMemory();
        }
        t->slots = slots;
        uint32_t *free_slots = PyMem_Realloc(t->free_slots, (size_t)cap * sizeof(uint32_t));
        if (free_slots == NULL) {
            return PyErr_NoMemory();
        }
        t->free_slots = free_slots;
        t->cap = cap;
    }
    int dup = fcntl((int)fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (t->nfree) {
        slot = t->free_slots[--t->nfree];
    } else {
        slot = t->used++;
        t->slots[slot].gen = 1;
    }
    entry *e = &t->slots[slot];
    e->fd = dup;
    e->flags = (uint32_t)flags;
    e->frames = 0;
    e->bytes = 0;
    t->live++;
    return PyLong_FromLongLong(((long long)e->gen << 32) | (long long)slot);
}

static PyObject *
table_remove(SendTable *t, PyObject *arg)
{
    if (not_busy(t) < 0) {
        return NULL;
    }
    entry *e = live_entry(t, arg);
    if (e == NULL) {
        return NULL;
    }
    /* The tuple first (it may fail: then nothing changed), and no pointer into the slots kept
       across it: an allocation can run a collection, and a finalizer another add (realloc). */
    uint32_t slot = (uint32_t)(e - t->slots);
    PyObject *counts = Py_BuildValue("(LL)", (long long)e->frames, (long long)e->bytes);
    if (counts == NULL) {
        return NULL;
    }
    e = &t->slots[slot];
    if (e->fd < 0) { /* removed by that finalizer meanwhile */
        return counts;
    }
    close(e->fd);
    e->fd = -1;
    /* Handles stay positive int64s. A slot's generation wraps after 2^31 reuses; a group that
       old is long gone (the writer drops a group unused for 25 frames, and rebuilds one whose
       set changed, as a teardown's does). */
    e->gen = e->gen == UINT32_MAX >> 1 ? 1 : e->gen + 1;
    t->free_slots[t->nfree++] = slot;
    t->live--;
    return counts;
}

static PyObject *
table_set(SendTable *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "set() takes exactly 3 arguments (%zd given)", nargs);
        return NULL;
    }
    long long handle = PyLong_AsLongLong(args[0]);
    if (handle == -1 && PyErr_Occurred()) {
        return NULL;
    }
    unsigned long bits = PyLong_AsUnsignedLong(args[1]);
    if (bits == (unsigned long)-1 && PyErr_Occurred()) {
        return NULL;
    }
    if (bits & ~(unsigned long)ALL_FLAGS) {
        PyErr_SetString(PyExc_ValueError, "unknown flag bits");
        return NULL;
    }
    int on = PyObject_IsTrue(args[2]);
    if (on < 0) {
        return NULL;
    }
    entry *e = entry_of(t, handle);
    if (e == NULL) { /* a terminal already removed: nothing to keep */
        Py_RETURN_FALSE;
    }
    e->flags = on ? e->flags | (uint32_t)bits : e->flags & ~(uint32_t)bits;
    Py_RETURN_TRUE;
}

static PyObject *
table_counts(SendTable *t, PyObject *arg)
{
    entry *e = live_entry(t, arg);
    return e == NULL ? NULL : Py_BuildValue("(LL)", (long long)e->frames, (long long)e->bytes);
}

static PyObject *
table_flags(SendTable *t, PyObject *arg)
{
    entry *e = live_entry(t, arg);
    return e == NULL ? NULL : PyLong_FromUnsignedLong(e->flags);
}

/* The handles as an int64 array: a buffer of format 'q' (or 'l' where long is 64 bits). */
static int
hold_handles(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=') {
        f++;
    }
    if (view->ndim != 1 || view->itemsize != 8 || (strcmp(f, "q") != 0 && strcmp(f, "l") != 0)) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_TypeError, "handles must be an array('q')");
        return -1;
    }
    return 0;
}

static PyObject *
table_send(SendTable *t, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "send() takes exactly 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (not_busy(t) < 0) {
        return NULL;
    }
    Py_buffer payload, hv;
    if (PyObject_GetBuffer(args[0], &payload, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (hold_handles(args[1], &hv) < 0) {
        PyBuffer_Release(&payload);
        return NULL;
    }
    PyObject *result = NULL;
    const long long *handles = (const long long *)hv.buf;
    Py_ssize_t n = hv.len / 8, nrec = 0, nfds = 0;
    if (n == 0 || payload.len == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* Records first (the stricter alignment), then per fd its slot, its handle's index and
       (for a shortfall) which fd it was. */
    void *block = PyMem_RawMalloc((size_t)n * (sizeof(shortfall) + 3 * sizeof(uint32_t) +
                                               sizeof(int)));
    if (block == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    shortfall *rec = (shortfall *)block;
    uint32_t *slot_of_fd = (uint32_t *)(rec + n);
    uint32_t *index_of_fd = slot_of_fd + n;
    uint32_t *fd_of_short = index_of_fd + n;
    int *fds = (int *)(fd_of_short + n);
    for (Py_ssize_t i = 0; i < n; i++) {
        entry *e = entry_of(t, handles[i]);
        if (e == NULL || e->flags != 0) {
            rec[nrec].index = i;
            rec[nrec].sent = 0;
            rec[nrec].err = NOT_ELIGIBLE;
            nrec++;
            continue;
        }
        fds[nfds] = e->fd;
        slot_of_fd[nfds] = (uint32_t)(e - t->slots);
        index_of_fd[nfds] = (uint32_t)i;
        nfds++;
    }
    shortfall *sent_rec = rec + nrec;
    Py_ssize_t nshort = 0;
    const char *buf = payload.buf;
    size_t len = (size_t)payload.len;
    t->sending = 1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < nfds; k++) {
        ssize_t r;
        do {
            r = send(fds[k], buf, len, SEND_FLAGS);
        } while (r < 0 && errno == EINTR);
        if (r >= 0 && (size_t)r == len) {
            continue;
        }
        sent_rec[nshort].index = k; /* an fd index for now */
        sent_rec[nshort].sent = r < 0 ? 0 : (Py_ssize_t)r;
        sent_rec[nshort].err = r < 0 ? errno : 0;
        nshort++;
    }
    Py_END_ALLOW_THREADS
    t->sending = 0;
    /* Counted: every terminal the kernel took bytes from or that would block (its rest goes to
       its transport, which Python takes back if that write fails); a refused one is not. */
    Py_ssize_t s = 0;
    for (Py_ssize_t k = 0; k < nfds; k++) {
        int err = 0;
        if (s < nshort && sent_rec[s].index == k) {
            err = sent_rec[s].err;
            sent_rec[s].index = index_of_fd[k];
            fd_of_short[s] = (uint32_t)k;
            s++;
        }
        if (err == 0 || err == EAGAIN || err == EWOULDBLOCK) {
            entry *e = &t->slots[slot_of_fd[k]];
            e->frames += 1;
            e->bytes += (int64_t)len;
        }
    }
    nrec += nshort;
    result = nrec == 0 ? Py_NewRef(Py_None) : build_result(rec, nrec);
    if (result == NULL) {
        /* No memory for the report: the entries that fell short cannot be told their rest, and
           a partial send left half a WebSocket frame on their stream. Cut them: flagged
           closing (no more sends from here) and their socket shut both ways, so the transport
           meets the end and the terminal is torn down, never fed after a truncated frame. The
           MemoryError goes to the caller. */
        for (Py_ssize_t k = 0; k < nshort; k++) {
            entry *e = &t->slots[slot_of_fd[fd_of_short[k]]];
            e->flags |= FLAG_CLOSING;
            shutdown(e->fd, SHUT_RDWR);
        }
    }
    PyMem_RawFree(block);

done:
    PyBuffer_Release(&hv);
    PyBuffer_Release(&payload);
    return result;
}

static Py_ssize_t
table_len(SendTable *t)
{
    return (Py_ssize_t)t->live;
}

static PyMethodDef table_methods[] = {
    {"add", (PyCFunction)(void (*)(void))table_add, METH_FASTCALL,
     "add(fd, flags, /) -> handle: a terminal's entry, over the table's own duplicate of fd."},
    {"remove", (PyCFunction)table_remove, METH_O,
     "remove(handle, /) -> (frames, bytes): close the entry's duplicate; its counts."},
    {"set", (PyCFunction)(void (*)(void))table_set, METH_FASTCALL,
     "set(handle, bits, on, /) -> bool: raise (on) or clear the bits; False for a removed one."},
    {"counts", (PyCFunction)table_counts, METH_O,
     "counts(handle, /) -> (frames, bytes) written by send()."},
    {"flags", (PyCFunction)table_flags, METH_O, "flags(handle, /) -> the entry's flag bits."},
    {"send", (PyCFunction)(void (*)(void))table_send, METH_FASTCALL,
     "send(payload, handles, /) -> None | [(index, sent, errno)]: payload to every entry of\n"
     "handles (an array('q')) whose flags are clear, one non-blocking send each, GIL released;\n"
     "errno -1 (NOT_ELIGIBLE): a removed handle or a flag set, else as send_many."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods table_as_sequence = {
    .sq_length = (lenfunc)table_len,
};

static PyTypeObject SendTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "monotape.platform.server._sendmany.SendTable",
    .tp_basicsize = sizeof(SendTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The writer's terminals as C entries: fds, flags and counts (see sendmany.py).",
    .tp_new = table_new,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_methods = table_methods,
    .tp_as_sequence = &table_as_sequence,
};

PyDoc_STRVAR(send_many_doc,
"send_many(payload, fds, /)\n--\n\n"
"Write payload (a bytes-like object, or a sequence of them as one iovec) to every socket\n"
"in fds with one non-blocking send per socket (MSG_DONTWAIT | MSG_NOSIGNAL), GIL released.\n"
"Return None when every socket took every byte, else a list of (index, sent, errno) for\n"
"the sockets that did not: (i, n, 0) partial, (i, 0, EAGAIN) would block, (i, 0, e) error.");

static PyMethodDef sendmany_methods[] = {
    {"send_many", (PyCFunction)(void (*)(void))send_many, METH_FASTCALL, send_many_doc},
    {NULL, NULL, 0, NULL},
};

static int
sendmany_exec(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "MAX_CHUNKS", MAX_CHUNKS) < 0 ||
        PyModule_AddIntConstant(module, "NOT_ELIGIBLE", NOT_ELIGIBLE) < 0 ||
        PyModule_AddIntConstant(module, "FLAG_CLOSING", FLAG_CLOSING) < 0 ||
        PyModule_AddIntConstant(module, "FLAG_NOT_OPEN", FLAG_NOT_OPEN) < 0 ||
        PyModule_AddIntConstant(module, "FLAG_BEHIND", FLAG_BEHIND) < 0 ||
        PyModule_AddIntConstant(module, "FLAG_QUEUED", FLAG_QUEUED) < 0) {
        return -1;
    }
    if (PyType_Ready(&SendTableType) < 0 ||
        PyModule_AddObjectRef(module, "SendTable", (PyObject *)&SendTableType) < 0) {
        return -1;
    }
#if defined(__SANITIZE_ADDRESS__)
    PyObject *sanitized = Py_True;
#else
    PyObject *sanitized = Py_False;
#endif
    /* Lets the sanitizer run check that it loaded the instrumented build, not the venv's. */
    return PyModule_AddObjectRef(module, "SANITIZED", sanitized);
}

static PyModuleDef_Slot sendmany_slots[] = {
    {Py_mod_exec, (void *)sendmany_exec},
    {0, NULL},
};

static struct PyModuleDef sendmany_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_sendmany",
    .m_doc = "One payload to many sockets in one call (see monotape.platform.server.sendmany).",
    .m_size = 0,
    .m_methods = sendmany_methods,
    .m_slots = sendmany_slots,
};

PyMODINIT_FUNC
PyInit__sendmany(void)
{
    return PyModuleDef_Init(&sendmany_module);
}
