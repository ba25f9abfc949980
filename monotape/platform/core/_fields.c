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

   The pure-Python twin with the same results is monotape.platform.core.fields.python_int64_field.
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

static PyMethodDef fields_methods[] = {
    {"int64_field", (PyCFunction)(void (*)(void))int64_field, METH_FASTCALL,
     "int64_field(items, member) -> bytes: member.__get__(item) of every item, as int64s."},
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
