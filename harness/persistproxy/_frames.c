/* Compiled framing for the persistent proxy's data path (RULEBOOK PER-1: the proxy must keep up with
 * the application; docs/persistent-proxy.md, Performance: the interpreter's cost per message).
 *
 * frames(data, run_type) walks the complete PostgreSQL v3 messages of `data` (type byte, int32
 * length including itself, payload) from its start and returns (kinds, ends):
 *   kinds  bytes, one type byte per entry;
 *   ends   list of int, the offset just past each entry.
 * Consecutive messages of type `run_type` (the backend's DataRow, 'D') collapse into one entry whose
 * end is the end of the run; pass -1 to collapse nothing (the frontend's 'D' is Describe).
 * The walk stops before fewer than 5 bytes, before a length below 4 (the caller's own header check
 * names that error) and before an incomplete message; the caller reads the header at the last end.
 *
 * The module also holds _track.c's one-call tracking (simple_request, simple_answer, configure).
 *
 * harness/persistproxy/frames.py holds the same function in Python (used when this extension is
 * not built) and the property test tests/test_frames.py holds the two to the same answers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_wire.h"

/* _track.c: the one-call tracking of the commonest request cycle, in this module too */
extern PyMethodDef track_methods[];
int track_init(void);

static PyObject *
frames(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int run_type;
    if (!PyArg_ParseTuple(args, "y*i:frames", &view, &run_type))
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, pos = 0, count = 0, cap = 16;
    unsigned char small_kinds[16];
    unsigned char *kinds = small_kinds;
    PyObject *ends = PyList_New(0);
    if (ends == NULL)
        goto fail;
    Py_ssize_t end;
    while ((end = wire_next(p, n, pos)) >= 0) {
        unsigned char t = p[pos];
        if ((int)t == run_type && count > 0 && (int)kinds[count - 1] == run_type) {
            /* extend the run: replace its end */
            PyObject *e = PyLong_FromSsize_t(end);
            if (e == NULL || PyList_SetItem(ends, count - 1, e) < 0)
                goto fail;
        } else {
            if (count == cap) {
                unsigned char *grown;
                if (kinds == small_kinds) {
                    grown = PyMem_Malloc((size_t)cap * 2);
                    if (grown != NULL)
                        memcpy(grown, small_kinds, (size_t)cap);
                } else {
                    grown = PyMem_Realloc(kinds, (size_t)cap * 2);
                }
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto fail;
                }
                kinds = grown;
                cap *= 2;
            }
            kinds[count++] = t;
            PyObject *e = PyLong_FromSsize_t(end);
            if (e == NULL)
                goto fail;
            int rc = PyList_Append(ends, e);
            Py_DECREF(e);
            if (rc < 0)
                goto fail;
        }
        pos = end;
    }
    PyObject *kind_bytes = PyBytes_FromStringAndSize((const char *)kinds, count);
    if (kinds != small_kinds)
        PyMem_Free(kinds);
    PyBuffer_Release(&view);
    if (kind_bytes == NULL) {
        Py_DECREF(ends);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, kind_bytes, ends);
    Py_DECREF(kind_bytes);
    Py_DECREF(ends);
    return result;

fail:
    if (kinds != small_kinds)
        PyMem_Free(kinds);
    Py_XDECREF(ends);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"frames", frames, METH_VARARGS,
     "frames(data, run_type) -> (kinds, ends): the complete messages of data, runs of run_type collapsed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_frames",
    "Compiled framing for the persistent proxy's data path (see harness/persistproxy/frames.py).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    if (track_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddFunctions(m, track_methods) < 0)
        Py_CLEAR(m);
    return m;
}
