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
    if (PyModule_AddIntConstant(module, "MAX_CHUNKS", MAX_CHUNKS) < 0) {
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
