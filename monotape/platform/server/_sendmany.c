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
 * The pure-Python twin with the same behaviour is monotape/platform/server/sendmany.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, READONLY (3.11) */

#include <errno.h>
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

/* send_group: the writer's frame path (server/sendloop.py). Per connection object, with the GIL:
   is it eligible for a send behind its transport's back (the same test as the Python loop:
   conn.closing is False, the protocol's state is OPEN (conn.protocol_state, its mirror; None:
   conn.protocol.state), conn.conn_id not in behind, conn.fd >= 0,
   transport.get_write_buffer_size() == 0, not transport.is_closing())? Then, GIL released, one
   non-blocking send per eligible socket; then, with the GIL, frames_sent += 1 and
   bytes_sent += len(payload) on each connection the kernel took bytes from or that would
   block (its rest goes to the transport: Python counts it back if that write fails), counted
   in the eligibility pass and taken back for a refused send (both counters or neither). Once
   the sends ran the report always comes back: an error while counting back is reported as
   unraisable, not raised, since a partial send's rest must reach its transport (else its
   WebSocket frame stays truncated); only a MemoryError building the report itself is raised,
   after the connections that fell short were cut (closing = True, transport.abort()). The
   connections counted on are held by reference until the end, so a list that an attribute's
   own Python edits can neither free one under us nor point the count-back at another. Only the
   exceptions come back, so a group where every terminal took the bytes costs Python nothing
   per terminal: (i, 0, -1) not eligible (Python takes its ordered path), else as send_many. */
static PyObject *s_closing, *s_protocol_state, *s_protocol, *s_state, *s_private_state;
static PyObject *s_conn_id, *s_fd;
static PyObject *s_transport;
static PyObject *s_get_write_buffer_size, *s_is_closing, *s_frames_sent, *s_bytes_sent, *s_one;
static PyObject *s_minus_one, *s_abort;

#define NOT_ELIGIBLE (-1)
#define SHORT (-1) /* an fd slot after the sends: that connection fell short */

/* The pending exception, put aside while cleanup runs Python code, then put back. */
typedef struct {
    PyObject *type, *value, *tb;
} saved_error;

static saved_error
save_error(void)
{
    saved_error e = {NULL, NULL, NULL};
#if PY_VERSION_HEX >= 0x030C0000
    e.value = PyErr_GetRaisedException();
#else
    PyErr_Fetch(&e.type, &e.value, &e.tb);
#endif
    return e;
}

static void
restore_error(saved_error e)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(e.value);
#else
    PyErr_Restore(e.type, e.value, e.tb);
#endif
}

/* The connection's own attributes read at their slot offsets. Profiled at 4,200 terminals
   (perf on bench_fanout's server, 2026-12-01): the attribute machinery around each read
   (_PyObject_GenericGetAttrWithDict, PyMember_GetOne, the type's dict) was ~13% of the server's
   CPU, the largest cost outside the kernel's send path. A type qualifies when every name below
   is a writable __slots__ member (T_OBJECT_EX) found by the type's own lookup and the type keeps
   the generic getattr/setattr: then a read of the slot is exactly what `conn.name` does. The
   map is keyed by the type (held) and its version tag, which any change to the type or its bases
   (a class attribute set, a descriptor added) replaces, so a changed type is looked up afresh.
   An empty slot (AttributeError) and any other object take the generic path. */
enum {
    F_CLOSING,
    F_PROTOCOL_STATE,
    F_PROTOCOL,
    F_CONN_ID,
    F_FD,
    F_TRANSPORT,
    F_FRAMES_SENT,
    F_BYTES_SENT,
    F_COUNT
};

typedef struct {
    PyTypeObject *type; /* strong reference; NULL: none mapped yet */
    unsigned int version;
    Py_ssize_t offset[F_COUNT];
} slot_map;

static slot_map the_map;
static PyObject **field_names[F_COUNT] = {
    &s_closing,   &s_protocol_state, &s_protocol,    &s_conn_id,
    &s_fd,        &s_transport,      &s_frames_sent, &s_bytes_sent,
};

/* The map for conn's type, or NULL when it does not qualify (no exception either way). */
static const slot_map *
map_for(PyObject *conn)
{
    PyTypeObject *type = Py_TYPE(conn);
    if (the_map.type == type && the_map.version == type->tp_version_tag && the_map.version != 0) {
        return &the_map;
    }
    if (type->tp_getattro != PyObject_GenericGetAttr ||
        type->tp_setattro != PyObject_GenericSetAttr) {
        return NULL;
    }
    Py_ssize_t offset[F_COUNT];
    for (int f = 0; f < F_COUNT; f++) {
        PyObject *d = _PyType_Lookup(type, *field_names[f]); /* borrowed; no exception set */
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            return NULL;
        }
        /* The descriptor must be one of this type's own slots (or a base's): a class can bind
           another class's member descriptor under its own name, which Python refuses
           ("doesn't apply to a ... object") and an offset read here would read and write
           outside the object. */
        if (!PyType_IsSubtype(type, PyDescr_TYPE(d))) {
            return NULL;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || (m->flags & READONLY) || m->offset <= 0 ||
            (size_t)m->offset + sizeof(PyObject *) > (size_t)type->tp_basicsize) {
            return NULL;
        }
        offset[f] = m->offset;
    }
    /* The lookups gave the type a version tag (0: none could be assigned: never cached). */
    if (type->tp_version_tag == 0) {
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(the_map.type, type);
    the_map.version = type->tp_version_tag;
    memcpy(the_map.offset, offset, sizeof(offset));
    return &the_map;
}

/* The map still describes conn (an attribute's own Python may have changed the type). */
static inline int
map_holds(const slot_map *m, PyObject *conn)
{
    return m != NULL && Py_TYPE(conn) == m->type && m->version == m->type->tp_version_tag;
}

static inline PyObject **
slot_of(const slot_map *m, PyObject *conn, int f)
{
    return (PyObject **)((char *)conn + m->offset[f]);
}

/* conn.<field> as a new reference: the slot when mapped and set, else the attribute machinery
   (which raises the AttributeError of an empty slot, or runs another object's own lookup). */
static inline PyObject *
get_field(PyObject *conn, const slot_map *m, int f)
{
    if (map_holds(m, conn)) {
        PyObject *v = *slot_of(m, conn, f);
        if (v != NULL) {
            return Py_NewRef(v);
        }
    }
    return PyObject_GetAttr(conn, *field_names[f]);
}

/* conn.<field> = value (a new reference, stolen), as member_set would for a mapped type. */
static inline int
set_field(PyObject *conn, const slot_map *m, int f, PyObject *value)
{
    if (map_holds(m, conn)) {
        Py_XSETREF(*slot_of(m, conn, f), value);
        return 0;
    }
    int r = PyObject_SetAttr(conn, *field_names[f], value);
    Py_DECREF(value);
    return r;
}

/* conn.protocol.state as a new reference, or NULL with an exception set. websockets'
   Protocol.state is a property returning self._state: read the attribute (~20 ns) rather than
   call the property (~150 ns); another protocol object without it is asked for its state. */
static PyObject *
protocol_state(PyObject *conn, const slot_map *m)
{
    PyObject *protocol = get_field(conn, m, F_PROTOCOL);
    if (protocol == NULL) {
        return NULL;
    }
    PyObject *v = PyObject_GetAttr(protocol, s_private_state);
    if (v == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        v = PyObject_GetAttr(protocol, s_state);
    }
    Py_DECREF(protocol);
    return v;
}

/* 1: eligible (its fd in *fd), 0: not, -1: an exception (set). */
static int
eligible(PyObject *conn, const slot_map *m, PyObject *behind, PyObject *open_state, int *fd)
{
    PyObject *v = get_field(conn, m, F_CLOSING);
    if (v == NULL) {
        return -1;
    }
    int bad = v != Py_False;
    Py_DECREF(v);
    if (bad) {
        return 0;
    }
    /* The protocol's state as the connection mirrors it (TerminalProtocol's setter keeps
       conn.protocol_state on every change): a read of the object we hold. Reading it from the
       protocol instead meant its object, its dict and the dict's keys, all cold by the time a
       frame reaches the connection (perf, bench_fanout's server at 4,200 terminals, 2026-12-02:
       this test's share of the process went from 12.9% to 6.3% with the mirror). None, or no
       such attribute (another object), asks the protocol. */
    v = get_field(conn, m, F_PROTOCOL_STATE);
    if (v == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
    } else if (v == Py_None) {
        Py_CLEAR(v);
    }
    if (v == NULL) {
        v = protocol_state(conn, m);
        if (v == NULL) {
            return -1;
        }
    }
    bad = v != open_state;
    Py_DECREF(v);
    if (bad) {
        return 0;
    }
    if (PySet_GET_SIZE(behind) != 0) { /* the common case: nobody is behind */
        v = get_field(conn, m, F_CONN_ID);
        if (v == NULL) {
            return -1;
        }
        int in_behind = PySet_Contains(behind, v);
        Py_DECREF(v);
        if (in_behind != 0) {
            return in_behind < 0 ? -1 : 0;
        }
    }
    v = get_field(conn, m, F_FD);
    if (v == NULL) {
        return -1;
    }
    long n = PyLong_AsLong(v);
    Py_DECREF(v);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (n < 0 || n > INT_MAX) {
        return 0;
    }
    *fd = (int)n;
    PyObject *transport = get_field(conn, m, F_TRANSPORT);
    if (transport == NULL) {
        return -1;
    }
    v = PyObject_CallMethodNoArgs(transport, s_get_write_buffer_size);
    if (v == NULL) {
        Py_DECREF(transport);
        return -1;
    }
    long queued = PyLong_AsLong(v);
    Py_DECREF(v);
    if (queued == -1 && PyErr_Occurred()) {
        Py_DECREF(transport);
        return -1;
    }
    if (queued != 0) {
        Py_DECREF(transport);
        return 0;
    }
    v = PyObject_CallMethodNoArgs(transport, s_is_closing);
    Py_DECREF(transport);
    if (v == NULL) {
        return -1;
    }
    int closing = PyObject_IsTrue(v);
    Py_DECREF(v);
    return closing < 0 ? -1 : !closing;
}

static int
add_to(PyObject *conn, int f, PyObject *amount)
{
    const slot_map *m = map_for(conn);
    PyObject *v = get_field(conn, m, f);
    if (v == NULL) {
        return -1;
    }
    PyObject *sum = PyNumber_Add(v, amount);
    Py_DECREF(v);
    if (sum == NULL) {
        return -1;
    }
    return set_field(conn, m, f, sum);
}

/* Count one frame of `size` bytes on conn (sign +1) or take it back (sign -1), both counters or
   neither: a bytes_sent that fails after frames_sent took its step takes that step back. */
static int
count_frame(PyObject *conn, int sign, PyObject *size_obj, PyObject *minus_size)
{
    PyObject *frames = sign > 0 ? s_one : s_minus_one;
    if (add_to(conn, F_FRAMES_SENT, frames) < 0) {
        return -1;
    }
    if (add_to(conn, F_BYTES_SENT, sign > 0 ? size_obj : minus_size) == 0) {
        return 0;
    }
    saved_error saved = save_error();
    if (add_to(conn, F_FRAMES_SENT, sign > 0 ? s_minus_one : s_one) < 0) {
        PyErr_WriteUnraisable(conn); /* a second failure: the counter stays off by one */
    }
    restore_error(saved);
    return -1;
}

/* A connection whose short send cannot be reported: mark it closing and abort its transport
   (connection_lost tears it down) rather than leave a truncated frame on its stream. Errors are
   swallowed: this runs only while a MemoryError is on its way to the caller. */
static void
cut(PyObject *conn)
{
    if (PyObject_SetAttr(conn, s_closing, Py_True) < 0) {
        PyErr_Clear();
    }
    PyObject *transport = PyObject_GetAttr(conn, s_transport);
    if (transport == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *r = PyObject_CallMethodNoArgs(transport, s_abort);
    Py_DECREF(transport);
    if (r == NULL) {
        PyErr_Clear();
    }
    Py_XDECREF(r);
}

/* Each connection's objects are cold by the time a frame reaches it (the kernel's send path in
   between evicts them), so the pass waits on memory per attribute. Ask for them ahead: the
   connection PREFETCH_FAR items on, and the fd's int and the transport of the one PREFETCH_NEAR
   on (its slots asked for earlier, so reading them no longer waits). The protocol is not read
   at all while its state is mirrored on the connection. Only a hint: a wrong address costs
   nothing but the hint, and items of another type are skipped. */
#define PREFETCH_FAR 8
#define PREFETCH_NEAR 4
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch((const void *)(p))
#else
#define PREFETCH(p) ((void)(p))
#endif

static inline void
prefetch_ahead(PyObject *seq, Py_ssize_t i, Py_ssize_t n, const slot_map *m)
{
    if (i + PREFETCH_FAR < n) {
        PyObject *far = PySequence_Fast_GET_ITEM(seq, i + PREFETCH_FAR);
        PREFETCH(far);
        PREFETCH((const char *)far + 64);
    }
    if (i + PREFETCH_NEAR < n) {
        PyObject *near = PySequence_Fast_GET_ITEM(seq, i + PREFETCH_NEAR);
        if (Py_TYPE(near) == m->type) {
            PyObject *fd = *slot_of(m, near, F_FD); /* an int object of its own past 256 */
            PyObject *transport = *slot_of(m, near, F_TRANSPORT);
            if (fd != NULL) {
                PREFETCH(fd);
            }
            if (transport != NULL) {
                PREFETCH(transport);
                PREFETCH((const char *)transport + 64);
            }
        }
    }
}

static PyObject *
send_group(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *seq = NULL;
    PyObject *result = NULL;
    PyObject *size_obj = NULL;
    PyObject *minus_size = NULL;
    Py_buffer view;
    void *block = NULL;
    shortfall *rec;
    int *fds;
    Py_ssize_t *which;   /* the connection index of each fd */
    PyObject **held = NULL; /* a strong reference to the connection of each fd */
    Py_ssize_t n, nfds = 0, nrec = 0, k;

    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "send_group() takes exactly 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *behind = args[2];
    PyObject *open_state = args[3];
    if (!PyAnySet_Check(behind)) {
        PyErr_SetString(PyExc_TypeError, "behind must be a set");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    seq = PySequence_Fast(args[1], "conns must be a sequence of connections");
    if (seq == NULL) {
        goto done;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    if (n == 0 || view.len == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if ((size_t)n > ((size_t)PY_SSIZE_T_MAX) /
                        (sizeof(shortfall) + sizeof(PyObject *) + sizeof(Py_ssize_t) +
                         sizeof(int))) {
        PyErr_NoMemory();
        goto done;
    }
    /* Records first (the stricter alignment), then the held connections, the indexes, the fds. */
    block = PyMem_RawMalloc((size_t)n * (sizeof(shortfall) + sizeof(PyObject *) +
                                         sizeof(Py_ssize_t) + sizeof(int)));
    if (block == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    rec = (shortfall *)block;
    held = (PyObject **)(rec + n);
    which = (Py_ssize_t *)(held + n);
    fds = (int *)(which + n);
    size_obj = PyLong_FromSsize_t(view.len);
    minus_size = PyLong_FromSsize_t(-view.len);
    if (size_obj == NULL || minus_size == NULL) {
        goto take_back;
    }
    /* The eligibility pass. With the caller's list, an attribute's own Python may edit it:
       re-read the size each step, and hold every connection we count on (held[]), so the
       counting back after the sends neither reads the list again nor meets a freed object. */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PySequence_Fast_GET_SIZE(seq) != n) {
            PyErr_SetString(PyExc_RuntimeError, "conns changed size while being read");
            goto take_back;
        }
        PyObject *conn = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        const slot_map *m = map_for(conn);
        if (m != NULL) {
            prefetch_ahead(seq, i, n, m);
        }
        int fd = -1;
        int ok = eligible(conn, m, behind, open_state, &fd);
        if (ok <= 0) {
            Py_DECREF(conn);
        }
        if (ok < 0) {
            goto take_back;
        }
        if (!ok) {
            rec[nrec].index = i;
            rec[nrec].sent = 0;
            rec[nrec].err = NOT_ELIGIBLE;
            nrec++;
            continue;
        }
        /* Counted now, while the object is in the cache (a second pass after the sends would
           meet it evicted by the kernel's work); a refused send takes it back below. */
        if (count_frame(conn, +1, size_obj, minus_size) < 0) {
            Py_DECREF(conn);
            goto take_back;
        }
        held[nfds] = conn;
        fds[nfds] = fd;
        which[nfds] = i;
        nfds++;
    }
    /* The sends; their shortfalls land after the ineligible ones (kept apart by err). */
    shortfall *sent_rec = rec + nrec;
    Py_ssize_t nshort = 0;
    const char *buf = view.buf;
    size_t len = (size_t)view.len;
    Py_BEGIN_ALLOW_THREADS
    for (k = 0; k < nfds; k++) {
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
    /* From here on bytes are on the wire: whatever fails, the report goes back. A refused send
       takes its count back (a partial or EAGAIN keeps it: its rest goes to the transport); a
       take-back that raises is reported as unraisable and its counter stays off by one. */
    for (Py_ssize_t s = 0; s < nshort; s++) {
        int err = sent_rec[s].err;
        Py_ssize_t f = sent_rec[s].index;
        sent_rec[s].index = which[f];
        fds[f] = SHORT; /* the fds are spent: mark who fell short, for cut() below */
        if (err == 0 || err == EAGAIN || err == EWOULDBLOCK) {
            continue;
        }
        if (count_frame(held[f], -1, size_obj, minus_size) < 0) {
            PyErr_WriteUnraisable(held[f]);
        }
    }
    nrec += nshort;
    if (nrec == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    result = build_result(rec, nrec);
    if (result == NULL) {
        /* No memory for the report: the terminals that fell short cannot be told their rest,
           so their streams are cut (transport.abort(): connection_lost tears them down) rather
           than left with a truncated frame; the MemoryError goes to the caller. */
        saved_error saved = save_error();
        for (k = 0; k < nfds; k++) {
            if (fds[k] == SHORT) {
                cut(held[k]);
            }
        }
        restore_error(saved);
    }
    goto done;

take_back: /* an exception before any send: nothing was sent, so nothing stays counted */
    {
        saved_error saved = save_error();
        for (k = 0; k < nfds; k++) {
            if (count_frame(held[k], -1, size_obj, minus_size) < 0) {
                PyErr_WriteUnraisable(held[k]);
            }
        }
        restore_error(saved);
    }

done:
    for (k = 0; k < nfds; k++) {
        Py_DECREF(held[k]);
    }
    PyBuffer_Release(&view);
    PyMem_RawFree(block);
    Py_XDECREF(size_obj);
    Py_XDECREF(minus_size);
    Py_XDECREF(seq);
    return result;
}

PyDoc_STRVAR(send_group_doc,
"send_group(payload, conns, behind, open_state, /)\n--\n\n"
"The writer's frame path: payload to every connection of conns that may be written behind\n"
"its transport's back (not closing, protocol state is open_state: protocol_state, or when\n"
"that is None or absent protocol.state; conn_id not in behind,\n"
"fd >= 0, transport buffer empty, transport not closing), one non-blocking send each, GIL\n"
"released; frames_sent and bytes_sent counted on each written or handed-off connection.\n"
"Return None when all took all, else a list of (index, sent, errno): errno -1 not eligible,\n"
"else as send_many (the ineligible first, then the shortfalls in order).");

PyDoc_STRVAR(send_many_doc,
"send_many(payload, fds, /)\n--\n\n"
"Write payload (a bytes-like object, or a sequence of them as one iovec) to every socket\n"
"in fds with one non-blocking send per socket (MSG_DONTWAIT | MSG_NOSIGNAL), GIL released.\n"
"Return None when every socket took every byte, else a list of (index, sent, errno) for\n"
"the sockets that did not: (i, n, 0) partial, (i, 0, EAGAIN) would block, (i, 0, e) error.");

static PyMethodDef sendmany_methods[] = {
    {"send_many", (PyCFunction)(void (*)(void))send_many, METH_FASTCALL, send_many_doc},
    {"send_group", (PyCFunction)(void (*)(void))send_group, METH_FASTCALL, send_group_doc},
    {NULL, NULL, 0, NULL},
};

static int
sendmany_exec(PyObject *module)
{
    if (PyModule_AddIntConstant(module, "MAX_CHUNKS", MAX_CHUNKS) < 0 ||
        PyModule_AddIntConstant(module, "NOT_ELIGIBLE", NOT_ELIGIBLE) < 0) {
        return -1;
    }
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&s_closing, "closing"},
        {&s_protocol_state, "protocol_state"},
        {&s_protocol, "protocol"},
        {&s_state, "state"},
        {&s_private_state, "_state"},
        {&s_conn_id, "conn_id"},
        {&s_fd, "fd"},
        {&s_transport, "transport"},
        {&s_get_write_buffer_size, "get_write_buffer_size"},
        {&s_is_closing, "is_closing"},
        {&s_frames_sent, "frames_sent"},
        {&s_bytes_sent, "bytes_sent"},
        {&s_abort, "abort"},
    };
    if (s_one == NULL && (s_one = PyLong_FromLong(1)) == NULL) {
        return -1;
    }
    if (s_minus_one == NULL && (s_minus_one = PyLong_FromLong(-1)) == NULL) {
        return -1;
    }
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (*names[i].slot == NULL) { /* interned once per process, kept for its life */
            *names[i].slot = PyUnicode_InternFromString(names[i].name);
            if (*names[i].slot == NULL) {
                return -1;
            }
        }
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
