/*
 * _table: a frame's puts into the /dev/shm snapshot table in one call.
 *
 * Why native: the sequencer puts every changed symbol's full record into the table before it
 * publishes the frame. At 120k ticks/s that is ~2,400 puts a frame, and the Python put (a
 * dozen word reads and writes through a memoryview, a slice copy) cost 0.85 us each: 2.0 ms of
 * the 2.8 ms a frame's publish took, on the loop that keeps the 40 ms grid (bench_ring,
 * docs/ring.md). Here the same words are written in one pass.
 *
 * put_many(table, table_offset, slot_bytes, iids, max_chunk, tag, puts, /) -> int
 *
 *   table         the segment's mapping (a writable buffer: the mmap)
 *   table_offset  byte offset of the table in it; slot_bytes: one of an iid's two slots
 *   iids          how many iids the table holds; max_chunk: the largest chunk a slot takes
 *   tag           the ring entry the frame that carries these records will be (head + 1)
 *   puts          a sequence of (iid, epoch, seq, chunk) in put order
 *
 * Returns how many puts were refused: an iid outside the table (nothing written), or a chunk
 * larger than max_chunk (the slot written with no chunk: read as absent). Exactly what calling
 * the Python put (monotape/platform/ring/table.py, the twin) for each item in order does,
 * word for word. Every item is checked before any word is written: a malformed item (not a
 * 4-tuple, a version that is not two u64, a chunk that is not a buffer) raises and writes
 * nothing.
 *
 * Each slot is a seqlock: its first word odd while the put writes it, even after. Readers are
 * other processes reading the same words (ShmReader.snapshot), so the odd word is ordered
 * before the slot's words by a release fence, and the even word after them by a release store.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SNAPSHOT_HEAD 40 /* layout.py: seq, entry, epoch, version seq, length (u64 each) */

typedef struct {
    Py_ssize_t iid;
    uint64_t epoch;
    uint64_t seq;
    Py_buffer chunk;
} item;

static int
u64_of(PyObject *v, uint64_t *out, Py_ssize_t index, const char *what)
{
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "put %zd: %s must be an int", index, what);
        return -1;
    }
    unsigned long long n = PyLong_AsUnsignedLongLong(v);
    if (n == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "put %zd: %s is not a u64", index, what);
        return -1;
    }
    *out = (uint64_t)n;
    return 0;
}

/* Reads item `index` of puts into *it (its chunk buffer held); -1 with an exception set. */
static int
read_item(PyObject *put, item *it, Py_ssize_t index)
{
    if (!PyTuple_Check(put) || PyTuple_GET_SIZE(put) != 4) {
        PyErr_Format(PyExc_TypeError, "put %zd must be a tuple (iid, epoch, seq, chunk)", index);
        return -1;
    }
    PyObject *iid = PyNumber_Index(PyTuple_GET_ITEM(put, 0)); /* operator.index, as the twin */
    if (iid == NULL) {
        return -1;
    }
    it->iid = PyLong_AsSsize_t(iid);
    Py_DECREF(iid);
    if (it->iid == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return -1;
        }
        PyErr_Clear();
        it->iid = -1; /* outside the table either way: refused, as the twin does */
    }
    if (u64_of(PyTuple_GET_ITEM(put, 1), &it->epoch, index, "epoch") < 0 ||
        u64_of(PyTuple_GET_ITEM(put, 2), &it->seq, index, "seq") < 0) {
        return -1;
    }
    return PyObject_GetBuffer(PyTuple_GET_ITEM(put, 3), &it->chunk, PyBUF_SIMPLE);
}

static PyObject *
put_many(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError, "put_many() takes exactly 7 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t nums[5];
    for (int a = 1; a <= 5; a++) {
        nums[a - 1] = PyLong_AsSsize_t(args[a]);
        if (nums[a - 1] == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (nums[a - 1] < 0) {
            PyErr_Format(PyExc_ValueError, "put_many() argument %d must be >= 0", a + 1);
            return NULL;
        }
    }
    Py_ssize_t table_offset = nums[0], slot_bytes = nums[1], iids = nums[2];
    Py_ssize_t max_chunk = nums[3], tag_in = nums[4];
    uint64_t tag = (uint64_t)tag_in;
    if (table_offset % 8 || slot_bytes % 8 || slot_bytes < SNAPSHOT_HEAD ||
        max_chunk > slot_bytes - SNAPSHOT_HEAD) {
        PyErr_SetString(PyExc_ValueError, "put_many(): not a snapshot table's geometry");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[6], "puts must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_buffer table;
    if (PyObject_GetBuffer(args[0], &table, PyBUF_WRITABLE) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), held = 0, refused = 0;
    item *items = NULL;
    if (table_offset > table.len || iids > (table.len - table_offset) / 2 / slot_bytes) {
        PyErr_SetString(PyExc_ValueError, "put_many(): the table does not fit the buffer");
        goto done;
    }
    if (n == 0) {
        result = PyLong_FromLong(0);
        goto done;
    }
    items = PyMem_Calloc((size_t)n, sizeof(item));
    if (items == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* Every item read and held first: an error writes nothing. An iid's __index__ may run
       Python that edits a list of puts: the size is read again each step, and the item is
       held while it is read. */
    for (; held < n; held++) {
        if (PySequence_Fast_GET_SIZE(seq) != n) {
            PyErr_SetString(PyExc_RuntimeError, "puts changed size while being read");
            goto done;
        }
        PyObject *put = Py_NewRef(PySequence_Fast_GET_ITEM(seq, held));
        int ok = read_item(put, &items[held], held);
        Py_DECREF(put);
        if (ok < 0) {
            goto done;
        }
    }
    char *base = (char *)table.buf + table_offset;
    const Py_ssize_t half = slot_bytes / 8; /* words per slot */
    for (Py_ssize_t i = 0; i < n; i++) {
        item *it = &items[i];
        if (it->iid < 0 || it->iid >= iids) {
            refused++;
            continue;
        }
        uint64_t *w = (uint64_t *)(base + (size_t)it->iid * 2 * (size_t)slot_bytes);
        uint64_t *w1 = w + half;
        /* the slot holding this entry (the same frame's record again), else the older one */
        uint64_t t0 = w[1], t1 = w1[1];
        if ((t1 == tag && w1[0]) || (t0 != tag && t1 < t0)) {
            w = w1;
        }
        int too_large = it->chunk.len > max_chunk;
        uint64_t len = too_large ? 0 : (uint64_t)it->chunk.len;
        uint64_t s = w[0];
        uint64_t odd = s % 2 == 0 ? s + 1 : s + 2;
        __atomic_store_n(&w[0], odd, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE); /* the odd word before the slot's words */
        w[1] = tag;
        w[2] = it->epoch;
        w[3] = it->seq;
        w[4] = len;
        if (len) {
            memcpy((char *)w + SNAPSHOT_HEAD, it->chunk.buf, (size_t)len);
        }
        __atomic_store_n(&w[0], odd + 1, __ATOMIC_RELEASE); /* ...and the even one after */
        refused += too_large;
    }
    result = PyLong_FromSsize_t(refused);

done:
    for (Py_ssize_t i = 0; i < held; i++) {
        PyBuffer_Release(&items[i].chunk);
    }
    PyMem_Free(items);
    PyBuffer_Release(&table);
    Py_DECREF(seq);
    return result;
}

PyDoc_STRVAR(put_many_doc,
"put_many(table, table_offset, slot_bytes, iids, max_chunk, tag, puts, /)\n--\n\n"
"Put each (iid, epoch, seq, chunk) of puts into the snapshot table in order, as\n"
"monotape.platform.ring.table.put does one; return how many were refused (iid outside the\n"
"table, or a chunk over max_chunk: stored as absent). A malformed item writes nothing.");

static PyMethodDef table_methods[] = {
    {"put_many", (PyCFunction)(void (*)(void))put_many, METH_FASTCALL, put_many_doc},
    {NULL, NULL, 0, NULL},
};

static int
table_exec(PyObject *module)
{
#if defined(__SANITIZE_ADDRESS__)
    PyObject *sanitized = Py_True;
#else
    PyObject *sanitized = Py_False;
#endif
    /* Lets the sanitizer run check that it loaded the instrumented build, not the venv's. */
    return PyModule_AddObjectRef(module, "SANITIZED", sanitized);
}

static PyModuleDef_Slot table_slots[] = {
    {Py_mod_exec, (void *)table_exec},
    {0, NULL},
};

static struct PyModuleDef table_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_table",
    .m_doc = "A frame's puts into the snapshot table (see monotape.platform.ring.table).",
    .m_size = 0,
    .m_methods = table_methods,
    .m_slots = table_slots,
};

PyMODINIT_FUNC
PyInit__table(void)
{
    return PyModuleDef_Init(&table_module);
}
