/* One int field of many objects as native int64s (issue 12: stage recording by batch).

   int64_field(items, member) -> bytes: ``member.__get__(item)`` for every item of the sequence
   ``items``, each an int in the int64 range, packed as native-endian int64s. ``member`` is a
   member descriptor (a __slots__ field, a msgspec Struct field): the stage recorder reads every
   delivered tick's venue timestamp this way, one call per batch.

   Why in C: callgrind over bench_recording (1 s of a 120k ticks/s feed, 2026-12-02) put the
   per-tick read (a list comprehension) and its conversion to int64 (np.fromiter: PyArray_Pack,
   LONG_setitem, PyLong_AsLongAndOverflow per element) at ~110M of the 262M instructions that
   recording costs. Here an item whose type holds the member is read at its slot offset, as
   member_get does; anything else (another type, a member that is not an object slot) takes the
   descriptor's own __get__, so the answer and the exception are Python's in every case.

   in_range_prefix(items, table, key, value, signed, unsigned) -> int: how many leading items
   surely pass the tick gate's fast test, read the same way (below, where it is defined).

   The pure-Python twins with the same results are monotape.platform.core.fields's
   python_int64_field and python_in_range_prefix.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h> /* T_OBJECT_EX, T_OBJECT (3.11) */

static int
to_int64(PyObject *v, int64_t *out)
{
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "int64_field: expected an int, got %.100s",
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "int64_field: value out of the int64 range");
        return -1;
    }
    if (x == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = (int64_t)x;
    return 0;
}

static PyObject *
int64_field(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "int64_field(items, member) takes 2 arguments");
        return NULL;
    }
    PyObject *member = args[1];
    if (!Py_IS_TYPE(member, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "int64_field: member must be a member descriptor, not %.100s",
                     Py_TYPE(member)->tp_name);
        return NULL;
    }
    PyMemberDef *def = ((PyMemberDescrObject *)member)->d_member;
    PyTypeObject *owner = PyDescr_TYPE(member);
    int object_slot = (def->type == T_OBJECT_EX) && def->offset > 0;
    descrgetfunc get = Py_TYPE(member)->tp_descr_get;

    /* A tuple (a list is copied: one pointer per item): nothing the loop calls (a descriptor's
       __get__; a slot read calls no Python) can change what it walks. */
    PyObject *items = PySequence_Tuple(args[0]);
    if (items == NULL) {
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    if (n > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(int64_t)) {
        Py_DECREF(items);
        return PyErr_NoMemory();
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) {
        Py_DECREF(items);
        return NULL;
    }
    char *dst = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        PyTypeObject *type = Py_TYPE(item);
        int64_t x;
        PyObject *v = NULL;
        if (object_slot && PyObject_TypeCheck(item, owner) &&
            (size_t)def->offset + sizeof(PyObject *) <= (size_t)type->tp_basicsize) {
            v = *(PyObject **)((char *)item + def->offset); /* borrowed */
        }
        if (v != NULL) {
            if (to_int64(v, &x) < 0) {
                goto fail;
            }
        }
        else { /* the descriptor's own answer (or its AttributeError / TypeError) */
            v = get(member, item, (PyObject *)type);
            if (v == NULL) {
                goto fail;
            }
            int bad = to_int64(v, &x);
            Py_DECREF(v);
            if (bad) {
                goto fail;
            }
        }
        memcpy(dst + i * (Py_ssize_t)sizeof(int64_t), &x, sizeof(x));
    }
    Py_DECREF(items);
    return out;
fail:
    Py_DECREF(items);
    Py_DECREF(out);
    return NULL;
}

/* ---- in_range_prefix: how many leading items surely pass the tick gate's fast test ---- */

#define PREFIX_MAX_FIELDS 16

/* A member descriptor of an object slot that every instance of ``owner`` has; its offset. */
static Py_ssize_t
slot_of(PyObject *d, PyTypeObject *owner)
{
    if (!Py_IS_TYPE(d, &PyMemberDescr_Type) || PyDescr_TYPE(d) != owner) {
        PyErr_SetString(PyExc_TypeError,
                        "in_range_prefix: every field must be a member descriptor of one type");
        return -1;
    }
    PyMemberDef *def = ((PyMemberDescrObject *)d)->d_member;
    if (def->type != T_OBJECT_EX || def->offset <= 0 ||
        (size_t)def->offset + sizeof(PyObject *) > (size_t)owner->tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "in_range_prefix: a field is not an object slot");
        return -1;
    }
    return def->offset;
}

/* ``type`` reads every field the way ``owner`` does: its own attribute lookup is the owner's
   and each name still resolves to the owner's member descriptor (no property or slot of a
   subclass in front of it). Then a slot read is exactly what ``item.field`` returns. */
static int
reads_like(PyTypeObject *type, PyTypeObject *owner, PyObject *const *descrs, int n)
{
    if (type != owner &&
        (!PyType_IsSubtype(type, owner) || type->tp_getattro != owner->tp_getattro)) {
        return 0;
    }
    for (int f = 0; f < n; f++) {
        if (_PyType_Lookup(type, PyDescr_NAME(descrs[f])) != descrs[f]) { /* borrowed */
            return 0;
        }
    }
    return 1;
}

/* An exact int in 0 .. 2**63-1 (limit63) or 0 .. 2**64-1; never raises. */
static int
in_range(PyObject *v, int limit63)
{
    if (v == NULL || !PyLong_CheckExact(v)) {
        return 0;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow == 0) {
        return x >= 0;
    }
    if (overflow < 0 || limit63) {
        return 0;
    }
    (void)PyLong_AsUnsignedLongLong(v); /* 2**63 .. : a uint64 unless it raises */
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* in_range_prefix(items, table, key, value, signed, unsigned) -> int

   The number of leading items for which: every ``signed`` field is an int in 0 .. 2**63-1,
   every ``unsigned`` one an int in 0 .. 2**64-1, ``key`` an int in 0 .. len(table)-1 and
   ``value`` a str equal to ``table[key]`` (a str). ``key``, ``value`` and the fields are member
   descriptors of one type; ``table`` is a tuple. These are the tick gate's fast test
   (feeds/validate.py ``carried``) for a whole batch in one pass: every tick the sequencer
   takes off the bus passes it, and the Python loop over the batch was ~13% of the sequencer's
   CPU at 120k ticks/s (py-spy). The scan stops at the first item it cannot vouch for, also
   one it cannot read natively (another type, a bool, an unset slot): the caller's Python test
   goes on from there, so the answer is never wrong, only sometimes shorter. Never raises for
   an item; TypeError for arguments of the wrong kind. No Python code runs during the scan. */
static PyObject *
in_range_prefix(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "in_range_prefix(items, table, key, value, signed, unsigned) takes 6 "
                        "arguments");
        return NULL;
    }
    PyObject *table = args[1];
    PyObject *signed_fields = args[4];
    PyObject *unsigned_fields = args[5];
    if (!PyTuple_CheckExact(table) || !PyTuple_CheckExact(signed_fields) ||
        !PyTuple_CheckExact(unsigned_fields)) {
        PyErr_SetString(PyExc_TypeError, "in_range_prefix: table and the field lists are tuples");
        return NULL;
    }
    Py_ssize_t n_signed = PyTuple_GET_SIZE(signed_fields);
    Py_ssize_t n_unsigned = PyTuple_GET_SIZE(unsigned_fields);
    if (n_signed + n_unsigned + 2 > PREFIX_MAX_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "in_range_prefix: too many fields");
        return NULL;
    }
    if (!Py_IS_TYPE(args[2], &PyMemberDescr_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "in_range_prefix: every field must be a member descriptor of one type");
        return NULL;
    }
    PyTypeObject *owner = PyDescr_TYPE(args[2]);
    PyObject *descrs[PREFIX_MAX_FIELDS];
    Py_ssize_t offsets[PREFIX_MAX_FIELDS];
    int n = 0;
    descrs[n++] = args[2]; /* key */
    descrs[n++] = args[3]; /* value */
    for (Py_ssize_t i = 0; i < n_signed; i++) {
        descrs[n++] = PyTuple_GET_ITEM(signed_fields, i);
    }
    for (Py_ssize_t i = 0; i < n_unsigned; i++) {
        descrs[n++] = PyTuple_GET_ITEM(unsigned_fields, i);
    }
    for (int f = 0; f < n; f++) {
        offsets[f] = slot_of(descrs[f], owner);
        if (offsets[f] < 0) {
            return NULL;
        }
    }
    PyObject *seq = PySequence_Fast(args[0], "in_range_prefix: items must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t table_len = PyTuple_GET_SIZE(table);
    PyTypeObject *vouched = NULL; /* the last type reads_like() accepted */
    Py_ssize_t i = 0;
    for (; i < count; i++) {
        PyObject *item = items[i];
        PyTypeObject *type = Py_TYPE(item);
        if (type != vouched) {
            if (!reads_like(type, owner, descrs, n)) {
                break;
            }
            vouched = type;
        }
#define SLOT(f) (*(PyObject **)((char *)item + offsets[f])) /* borrowed; NULL if unset */
        PyObject *key = SLOT(0);
        if (key == NULL || !PyLong_CheckExact(key)) {
            break;
        }
        int overflow = 0;
        long long k = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow || k < 0 || k >= table_len) {
            break;
        }
        PyObject *expected = PyTuple_GET_ITEM(table, (Py_ssize_t)k);
        PyObject *value = SLOT(1);
        if (value == NULL || !PyUnicode_CheckExact(value) || !PyUnicode_CheckExact(expected) ||
            (value != expected && PyUnicode_Compare(value, expected) != 0)) {
            break;
        }
        int f = 2;
        for (; f < n; f++) {
            if (!in_range(SLOT(f), f < 2 + n_signed)) {
                break;
            }
        }
        if (f < n) {
            break;
        }
#undef SLOT
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(i);
}

static PyMethodDef fields_methods[] = {
    {"int64_field", (PyCFunction)(void (*)(void))int64_field, METH_FASTCALL,
     "int64_field(items, member) -> bytes: member.__get__(item) of every item, as int64s."},
    {"in_range_prefix", (PyCFunction)(void (*)(void))in_range_prefix, METH_FASTCALL,
     "in_range_prefix(items, table, key, value, signed, unsigned) -> int: how many leading "
     "items surely pass the tick gate's fast test."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fields_module = {
    PyModuleDef_HEAD_INIT, "_fields", "One int field of many objects as int64s.", 0,
    fields_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__fields(void)
{
    PyObject *module = PyModule_Create(&fields_module);
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
