/* _records: the record encoders' common case in C (docs/wire.md, Records).

   encode_full_record(tick) -> bytes
   encode_delta_record(base, new) -> bytes        (base None: the full record of new)
   bind(tick_type, full_checked, delta_checked)   (records.py calls it once, at import)

   Why native: every changed symbol is encoded once per 40 ms frame, and the host's sequencer
   also writes each one's full record into the snapshot table, so at 120k ticks/s (all 2,400
   instruments dirty every frame) the sequencer's whole frame publish took 30 ms of every 40 ms
   frame on its one loop with the Python encoders, 10 ms with these (bench_ring), time in which
   it does not decode the next batch (issue 12); in the one-process node it delays the fan-out
   (issue 13). bench_codec measures this file against the Python fast path it shadows: 0.08-0.17
   against 1.9-2.5 us a record (docs/benchmarks.md).

   What it covers: ticks of the bound type, or of a subclass that reads its fields the same way
   (kin(), below: the bus codec decodes into one, msgspec's WireTick), whose int fields are
   exact ints in the int64 range, with a uint16 iid, non-negative epochs, seqs and sizes and,
   for a delta, the same iid and a seq that does not go below its base in the same epoch. That
   is every valid tick a feed handler emits. Anything else (a value only uint64 holds, a wrong
   type, an unset field, an invalid value) is handed to the bound Python reference encoder,
   which gives the same bytes or the ValueError that names the field. So the output is byte
   for byte the reference's in every case; tests/wire/test_records_native.py checks it with
   hypothesis.

   The layout (one record: iid uint16 LE, flags, version, zigzag prices, size):
     full   iid flags epoch seq zz(bid) zz(ask) zz(last) size
     delta  iid flags base_epoch base_seq (seq-base_seq | epoch seq) zz(dbid) zz(dask) zz(dlast) size
   every number a LEB128 varint except a seq >= 2**56, which is fixed64 LE (FLAG_SEQ64, the
   first seq field only) because there it is strictly shorter. Price deltas wrap to int64.

   The pure-Python twin is monotape.platform.wire.records (python_encode_*_record).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h> /* T_OBJECT_EX (3.11) */

#define FLAG_DELTA 0x01
#define FLAG_NEW_EPOCH 0x02
#define FLAG_SEQ64 0x04
#define SEQ64_FROM ((uint64_t)1 << 56)
/* head 3 + base version <= 18 + new version <= 20 + three prices <= 30 + size <= 10 */
#define RECORD_MAX 96

enum { F_IID, F_EPOCH, F_SEQ, F_BID, F_ASK, F_LAST, F_SIZE, F_COUNT };
static const char *const FIELD_NAMES[F_COUNT] = {"iid", "epoch", "seq", "bid",
                                                 "ask", "last", "size"};

/* Set by bind() (records.py, at import); before it, an encode raises RuntimeError. */
static PyTypeObject *tick_type = NULL;
static Py_ssize_t offsets[F_COUNT];
static PyObject *descrs[F_COUNT]; /* tick_type's member descriptors, one per field */
static PyObject *names[F_COUNT];  /* the field names, interned */
static PyObject *full_checked = NULL;
static PyObject *delta_checked = NULL;

/* Subclasses found to read like the bound type, each with the version tag it had when checked
   (a change to the type, or to a base, gives it a new one: then it is checked again). */
#define KIN_MAX 4
static PyTypeObject *kin_types[KIN_MAX];
static unsigned int kin_tags[KIN_MAX];
static int kin_count = 0;

static void
forget_kin(void)
{
    for (int i = 0; i < kin_count; i++) {
        Py_CLEAR(kin_types[i]);
    }
    kin_count = 0;
}

/* A subclass reads like the bound type when a field's slot sits where the base's does (a
   subclass only ever appends to its base's layout) and holds what the reference reads:
   attribute lookup is the base's, and every field still resolves to the base's own member
   descriptor (no property, no slot of its own in front of it). The sequencer's ticks are
   these: the bus codec decodes into msgspec's WireTick, which adds nothing to Tick; with
   exact types only, every record of the host went to the Python reference (issue 12). */
static int
kin(PyTypeObject *type)
{
    int free_slot = -1;
    for (int i = 0; i < kin_count; i++) {
        if (kin_types[i] == type) {
            if ((type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) &&
                type->tp_version_tag == kin_tags[i]) {
                return 1;
            }
            free_slot = i; /* changed since: check it again, in its own place */
        }
    }
    if (!PyType_IsSubtype(type, tick_type) || type->tp_getattro != tick_type->tp_getattro) {
        return 0;
    }
    for (int f = 0; f < F_COUNT; f++) {
        if (_PyType_Lookup(type, names[f]) != descrs[f]) { /* borrowed; assigns a version tag */
            return 0;
        }
    }
    if (!(type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
        return 1; /* no tag to remember it by: checked at every call */
    }
    if (free_slot < 0 && kin_count < KIN_MAX) {
        Py_INCREF(type);
        free_slot = kin_count++;
        kin_types[free_slot] = type;
    }
    if (free_slot >= 0) {
        kin_tags[free_slot] = type->tp_version_tag;
    }
    return 1;
}

/* The tick's int fields as int64s; 0 when this is not the common case (the reference decides). */
static int
read_tick(PyObject *tick, int64_t out[F_COUNT])
{
    if (!Py_IS_TYPE(tick, tick_type) && !kin(Py_TYPE(tick))) {
        return 0;
    }
    for (int f = 0; f < F_COUNT; f++) {
        PyObject *v = *(PyObject **)((char *)tick + offsets[f]); /* borrowed; NULL if unset */
        if (v == NULL || !PyLong_CheckExact(v)) {
            return 0;
        }
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) {
            return 0; /* an exact int cannot fail otherwise */
        }
        out[f] = (int64_t)x;
    }
    return out[F_IID] >= 0 && out[F_IID] <= 0xFFFF && out[F_EPOCH] >= 0 && out[F_SEQ] >= 0 &&
           out[F_SIZE] >= 0;
}

static inline unsigned char *
put_uvarint(unsigned char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static inline uint64_t
zigzag(int64_t v)
{
    uint64_t u = (uint64_t)v << 1;
    return v < 0 ? ~u : u;
}

static inline unsigned char *
put_fixed64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        *p++ = (unsigned char)(v >> (8 * i));
    }
    return p;
}

/* iid LE, flags, epoch, then seq as fixed64 (flags gains FLAG_SEQ64) or a varint */
static unsigned char *
put_head(unsigned char *p, int64_t iid, int flags, int64_t epoch, int64_t seq)
{
    int seq64 = (uint64_t)seq >= SEQ64_FROM;
    *p++ = (unsigned char)(iid & 0xFF);
    *p++ = (unsigned char)(iid >> 8);
    *p++ = (unsigned char)(flags | (seq64 ? FLAG_SEQ64 : 0));
    p = put_uvarint(p, (uint64_t)epoch);
    return seq64 ? put_fixed64(p, (uint64_t)seq) : put_uvarint(p, (uint64_t)seq);
}

static PyObject *
full_of(const int64_t t[F_COUNT])
{
    unsigned char buf[RECORD_MAX];
    unsigned char *p = put_head(buf, t[F_IID], 0, t[F_EPOCH], t[F_SEQ]);
    p = put_uvarint(p, zigzag(t[F_BID]));
    p = put_uvarint(p, zigzag(t[F_ASK]));
    p = put_uvarint(p, zigzag(t[F_LAST]));
    p = put_uvarint(p, (uint64_t)t[F_SIZE]);
    return PyBytes_FromStringAndSize((const char *)buf, p - buf);
}

static int
bound(void)
{
    if (tick_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_records: bind() has not been called");
        return 0;
    }
    return 1;
}

static PyObject *
encode_full_record(PyObject *Py_UNUSED(module), PyObject *tick)
{
    if (!bound()) {
        return NULL;
    }
    int64_t t[F_COUNT];
    if (read_tick(tick, t)) {
        return full_of(t);
    }
    return PyObject_CallOneArg(full_checked, tick);
}

/* a - b as the int64 it wraps to (the reference's wrap_int64), without signed overflow */
static inline int64_t
wrapped_diff(int64_t a, int64_t b)
{
    uint64_t d = (uint64_t)a - (uint64_t)b;
    int64_t out;
    memcpy(&out, &d, sizeof(out));
    return out;
}

/* The delta record moving ``b`` to ``n`` (the same iid; in the same epoch, n's seq not below
   b's as uint64s: the callers check). seq and size are read as uint64s, prices as int64s. */
static PyObject *
delta_of(const int64_t n[F_COUNT], const int64_t b[F_COUNT], int same_epoch)
{
    unsigned char buf[RECORD_MAX];
    int flags = FLAG_DELTA | (same_epoch ? 0 : FLAG_NEW_EPOCH);
    unsigned char *p = put_head(buf, n[F_IID], flags, b[F_EPOCH], b[F_SEQ]);
    if (same_epoch) {
        p = put_uvarint(p, (uint64_t)n[F_SEQ] - (uint64_t)b[F_SEQ]);
    }
    else {
        p = put_uvarint(p, (uint64_t)n[F_EPOCH]);
        p = put_uvarint(p, (uint64_t)n[F_SEQ]);
    }
    p = put_uvarint(p, zigzag(wrapped_diff(n[F_BID], b[F_BID])));
    p = put_uvarint(p, zigzag(wrapped_diff(n[F_ASK], b[F_ASK])));
    p = put_uvarint(p, zigzag(wrapped_diff(n[F_LAST], b[F_LAST])));
    p = put_uvarint(p, (uint64_t)n[F_SIZE]);
    return PyBytes_FromStringAndSize((const char *)buf, p - buf);
}

static PyObject *
encode_delta_record(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "encode_delta_record(base, new) takes 2 arguments");
        return NULL;
    }
    if (!bound()) {
        return NULL;
    }
    PyObject *base = args[0];
    PyObject *new = args[1];
    int64_t n[F_COUNT];
    if (base == Py_None) {
        return read_tick(new, n) ? full_of(n) : PyObject_CallOneArg(full_checked, new);
    }
    int64_t b[F_COUNT];
    int same_epoch = 0;
    if (read_tick(base, b) && read_tick(new, n) && b[F_IID] == n[F_IID] &&
        ((same_epoch = (n[F_EPOCH] == b[F_EPOCH])) == 0 || n[F_SEQ] >= b[F_SEQ])) {
        return delta_of(n, b, same_epoch);
    }
    return PyObject_Vectorcall(delta_checked, args, 2, NULL);
}

static PyObject *
bind(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "bind(tick_type, full_checked, delta_checked) takes 3 arguments");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyCallable_Check(args[1]) || !PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "bind: a type and two callables");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0];
    Py_ssize_t found[F_COUNT];
    PyObject *found_descrs[F_COUNT];
    for (int f = 0; f < F_COUNT; f++) {
        /* the type's own member descriptor: an object slot inside every instance */
        PyObject *d = PyDict_GetItemString(type->tp_dict, FIELD_NAMES[f]); /* borrowed */
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            PyDescr_TYPE(d) != type) {
            PyErr_Format(PyExc_TypeError, "bind: %.100s.%s is not a slot of that type",
                         type->tp_name, FIELD_NAMES[f]);
            return NULL;
        }
        PyMemberDef *def = ((PyMemberDescrObject *)d)->d_member;
        if (def->type != T_OBJECT_EX || def->offset <= 0 ||
            (size_t)def->offset + sizeof(PyObject *) > (size_t)type->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "bind: %.100s.%s is not an object slot",
                         type->tp_name, FIELD_NAMES[f]);
            return NULL;
        }
        found[f] = def->offset;
        found_descrs[f] = d;
    }
    PyObject *found_names[F_COUNT];
    for (int f = 0; f < F_COUNT; f++) {
        found_names[f] = PyUnicode_InternFromString(FIELD_NAMES[f]);
        if (found_names[f] == NULL) {
            for (int g = 0; g < f; g++) {
                Py_DECREF(found_names[g]);
            }
            return NULL;
        }
    }
    /* the type read natively, and subclasses of it only as kin() admits them */
    forget_kin();
    Py_INCREF(args[0]);
    Py_INCREF(args[1]);
    Py_INCREF(args[2]);
    Py_XSETREF(tick_type, type);
    Py_XSETREF(full_checked, args[1]);
    Py_XSETREF(delta_checked, args[2]);
    for (int f = 0; f < F_COUNT; f++) {
        Py_INCREF(found_descrs[f]);
        Py_XSETREF(descrs[f], found_descrs[f]);
        Py_XSETREF(names[f], found_names[f]);
    }
    memcpy(offsets, found, sizeof(offsets));
    Py_RETURN_NONE;
}

/* encode_rows(iids, new, base) -> (deltas, puts, refused)

   A frame's records straight from the sequencer's state arrays (issue 35: no Tick per record).
   ``iids`` (int64[m]) are the rows that changed, ascending; ``new`` and ``base`` are each six
   arrays with a row per wire id: epoch (int64; -1 in ``base``: nothing published yet), seq
   (uint64), bid, ask, last (int64), size (uint64): the state now, and what the previous frame
   showed. Per row: the delta record moving base to new (the full record without a base) into
   ``deltas`` (iid -> bytes, in ``iids`` order) and (iid, epoch, seq, full record) into ``puts``;
   a row whose delta the format cannot carry (a seq below its base's in the same epoch) goes
   to ``refused`` instead, for the reference encoder to name. The bytes are those of
   encode_delta_record / encode_full_record on the same values (tests hold them to it), over
   the whole uint64 range of seq and size, which the Tick path leaves to the reference. Why:
   the Tick objects, the records and the per-record calls made taking a frame ~2.1 us a
   record in Python (~0.75 with this), and at 120k ticks/s every frame changes ~2,000
   symbols (docs/benchmarks.md). */
#define ROW_COLS 6
static PyObject *
encode_rows(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer ids = {0};
    PyObject *new_obj, *base_obj;
    if (!PyArg_ParseTuple(args, "y*O!O!", &ids, &PyTuple_Type, &new_obj, &PyTuple_Type,
                          &base_obj)) {
        return NULL;
    }
    Py_buffer cols[2 * ROW_COLS];
    int got = 0;
    PyObject *deltas = NULL, *puts = NULL, *refused = NULL, *result = NULL;
    if (PyTuple_GET_SIZE(new_obj) != ROW_COLS || PyTuple_GET_SIZE(base_obj) != ROW_COLS ||
        ids.len % 8 != 0) {
        PyErr_SetString(PyExc_TypeError, "encode_rows: int64 rows, then two tuples of 6 arrays");
        goto done;
    }
    for (; got < 2 * ROW_COLS; got++) {
        PyObject *col = PyTuple_GET_ITEM(got < ROW_COLS ? new_obj : base_obj, got % ROW_COLS);
        if (PyObject_GetBuffer(col, &cols[got], PyBUF_SIMPLE) < 0) {
            goto done;
        }
    }
    Py_ssize_t space = cols[0].len / 8;
    for (int c = 0; c < 2 * ROW_COLS; c++) {
        if (cols[c].len != space * 8) {
            PyErr_SetString(PyExc_ValueError, "encode_rows: the arrays disagree in length");
            goto done;
        }
    }
    Py_ssize_t m = ids.len / 8;
    const int64_t *rows = (const int64_t *)ids.buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (rows[i] < 0 || rows[i] >= space || rows[i] > 0xFFFF) {
            PyErr_Format(PyExc_IndexError, "encode_rows: row %lld is outside %zd",
                         (long long)rows[i], space);
            goto done;
        }
    }
    deltas = PyDict_New();
    puts = PyList_New(0);
    refused = PyList_New(0);
    if (deltas == NULL || puts == NULL || refused == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        Py_ssize_t r = (Py_ssize_t)rows[i];
        int64_t n[F_COUNT], b[F_COUNT];
        n[F_IID] = b[F_IID] = r;
        for (int f = 0; f < ROW_COLS; f++) { /* epoch seq bid ask last size: F_EPOCH.. */
            memcpy(&n[F_EPOCH + f], (const char *)cols[f].buf + 8 * r, 8);
            memcpy(&b[F_EPOCH + f], (const char *)cols[ROW_COLS + f].buf + 8 * r, 8);
        }
        PyObject *iid = PyLong_FromSsize_t(r);
        if (iid == NULL) {
            goto done;
        }
        PyObject *full = full_of(n);
        PyObject *delta = NULL;
        int same_epoch = n[F_EPOCH] == b[F_EPOCH];
        if (full == NULL) {
            Py_DECREF(iid);
            goto done;
        }
        if (b[F_EPOCH] < 0) {
            delta = full;
            Py_INCREF(delta);
        }
        else if (!same_epoch || (uint64_t)n[F_SEQ] >= (uint64_t)b[F_SEQ]) {
            delta = delta_of(n, b, same_epoch);
            if (delta == NULL) {
                Py_DECREF(iid);
                Py_DECREF(full);
                goto done;
            }
        }
        int failed;
        if (delta == NULL) {
            Py_DECREF(full);
            failed = PyList_Append(refused, iid) < 0;
        }
        else {
            PyObject *put = Py_BuildValue("(OLKN)", iid, (long long)n[F_EPOCH],
                                          (unsigned long long)(uint64_t)n[F_SEQ], full);
            failed = put == NULL || PyDict_SetItem(deltas, iid, delta) < 0 ||
                     PyList_Append(puts, put) < 0;
            Py_XDECREF(put);
            Py_DECREF(delta);
        }
        Py_DECREF(iid);
        if (failed) {
            goto done;
        }
    }
    result = PyTuple_Pack(3, deltas, puts, refused);
done:
    Py_XDECREF(deltas);
    Py_XDECREF(puts);
    Py_XDECREF(refused);
    PyBuffer_Release(&ids);
    for (int c = 0; c < got; c++) {
        PyBuffer_Release(&cols[c]);
    }
    return result;
}

static PyMethodDef records_methods[] = {
    {"encode_rows", encode_rows, METH_VARARGS,
     "encode_rows(iids, new, base) -> (deltas, puts, refused): a frame's records from the "
     "sequencer's state arrays."},
    {"encode_full_record", (PyCFunction)encode_full_record, METH_O,
     "encode_full_record(tick) -> bytes: the full record of tick."},
    {"encode_delta_record", (PyCFunction)(void (*)(void))encode_delta_record, METH_FASTCALL,
     "encode_delta_record(base, new) -> bytes: the record moving base to new."},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(tick_type, full_checked, delta_checked): the type read natively and the reference "
     "encoders for everything else."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef records_module = {
    PyModuleDef_HEAD_INIT, "_records", "The record encoders' common case in C.", 0,
    records_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__records(void)
{
    PyObject *module = PyModule_Create(&records_module);
    if (module == NULL) {
        return NULL;
    }
    /* make native-sanitize checks it loaded the instrumented build, not the installed one */
#if defined(__SANITIZE_ADDRESS__)
    PyObject *sanitized = Py_True;
#else
    PyObject *sanitized = Py_False;
#endif
    if (PyModule_AddObjectRef(module, "SANITIZED", sanitized) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
