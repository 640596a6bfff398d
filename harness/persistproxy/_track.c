/* Compiled one-call tracking of the commonest request cycle (RULEBOOK PER-1: the proxy must keep up
 * with the application; PER-2 / PER-4..8: nothing of the session state may be lost for it).
 *
 * simple_request(st, buf) -> bool
 *     When `buf` is exactly [Parse,] Bind, [Describe,] Execute, Sync of one statement, records in the
 *     SessionState `st` what SessionState.on_simple_request records and returns True; otherwise
 *     records nothing and returns False.
 * simple_answer(st, data) -> int
 *     When the complete messages at the start of `data` are exactly [ParseComplete,] BindComplete,
 *     [RowDescription | NoData,] DataRows, CommandComplete, ReadyForQuery answering exactly that
 *     request, records what SessionState.on_simple_answer records and returns the offset past the
 *     ReadyForQuery; otherwise records nothing and returns 0.
 * configure(...) hands the module the state module's shared objects (state.py calls it at import).
 *
 * harness/persistproxy/fastpath.py holds the same two functions in Python (on top of
 * SessionState.on_simple_request / on_simple_answer); tests/test_state_fast_paths.py runs random
 * histories through both and through the message-by-message tracker and requires the same state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_wire.h"

static PyObject *Pending;           /* state.Pending */
static PyObject *BIND, *SYNC, *DESCRIBE, *UNKNOWN;  /* the shared in-flight items */
static PyObject *execute_item_for;  /* state._execute_item_for(sql bytes, codec) -> Pending */
static PyObject *TAGS;              /* frozenset of the CommandComplete tags that may change state */
static PyObject *STATUS_I, *STATUS_T, *STATUS_E, *KIND_P, *EMPTY_BYTES, *STATEMENTS;
static PyObject *s_inflight, *s_statement_exec, *s_portal_exec, *s_counters, *s_unsynced, *s_codec,
    *s_injected, *s_kind, *s_name, *s_raw, *s_sql, *s_creates, *s_prepared_parse, *s_unnamed_parse,
    *s_rows_started, *s_copy_in_progress, *s_last_tag, *s_pending_tx, *s_committed, *s_cursors,
    *s_cycle_error, *s_txn_status, *s_end_cycle, *s_append, *s_clear;

#define MAX_ENTRIES 6

/* Walk up to MAX_ENTRIES complete messages of p[0:n] (runs of `run_type` as one entry, -1: none);
 * returns the entry count, or -1 when there are more; *stop is where the walk ended. */
static int
walk(const unsigned char *p, Py_ssize_t n, int run_type, unsigned char *kinds, Py_ssize_t *ends,
     Py_ssize_t *stop)
{
    Py_ssize_t pos = 0;
    int count = 0;
    Py_ssize_t end;
    while ((end = wire_next(p, n, pos)) >= 0) {
        unsigned char t = p[pos];
        if ((int)t == run_type && count > 0 && (int)kinds[count - 1] == run_type) {
            ends[count - 1] = end;
        } else {
            if (count == MAX_ENTRIES)
                return -1;
            kinds[count] = t;
            ends[count++] = end;
        }
        pos = end;
    }
    *stop = pos;
    return count;
}

/* The offset of the first NUL in p[from:to], or -1. */
static Py_ssize_t
nul(const unsigned char *p, Py_ssize_t from, Py_ssize_t to)
{
    if (from >= to)
        return -1;
    const unsigned char *hit = memchr(p + from, 0, (size_t)(to - from));
    return hit == NULL ? -1 : hit - p;
}

static int
set_bool(PyObject *st, PyObject *name, int value)
{
    return PyObject_SetAttr(st, name, value ? Py_True : Py_False);
}

/* dict[key bytes p[a:b]] -> the value, a borrowed reference or `fallback` (NULL with an error set). */
static PyObject *
lookup(PyObject *dict, const unsigned char *p, Py_ssize_t a, Py_ssize_t b, PyObject *fallback,
       PyObject **key_out)
{
    PyObject *key = PyBytes_FromStringAndSize((const char *)p + a, b - a);
    if (key == NULL)
        return NULL;
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value == NULL && PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    if (key_out != NULL)
        *key_out = key;
    else
        Py_DECREF(key);
    return value != NULL ? value : fallback;
}

/* Whether a call with `nargs` arguments may run: two of them, and configure() done; -1 (an error
 * set) otherwise. */
static int
usable(Py_ssize_t nargs, const char *signature)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s takes 2 arguments", signature);
        return -1;
    }
    if (Pending == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_frames.configure() was not called");
        return -1;
    }
    return 0;
}

static PyObject *
simple_request(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (usable(nargs, "simple_request(st, buf)") < 0)
        return NULL;
    PyObject *st = args[0], *data = args[1];
    if (!PyBytes_CheckExact(data))
        Py_RETURN_FALSE;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), stop, ends[MAX_ENTRIES];
    unsigned char kinds[MAX_ENTRIES];
    int count = walk(p, n, -1, kinds, ends, &stop);
    if (count < 3 || count > 5 || stop != n)
        Py_RETURN_FALSE;
    int parsed = kinds[0] == 'P';
    int described = count - parsed == 4;
    /* [P] B [D] E S */
    if ((count - parsed != 3 && !described) || kinds[parsed] != 'B' || (described && kinds[parsed + 1] != 'D') || kinds[count - 2] != 'E'
        || kinds[count - 1] != 'S')
        Py_RETURN_FALSE;
    Py_ssize_t bind_at = parsed ? ends[0] : 0, bind_end = ends[parsed];
    Py_ssize_t execute_at = ends[count - 3], execute_end = ends[count - 2];
    Py_ssize_t portal_end = nul(p, bind_at + 5, bind_end);
    Py_ssize_t stmt_end = portal_end < 0 ? -1 : nul(p, portal_end + 1, bind_end);
    Py_ssize_t run_end = nul(p, execute_at + 5, execute_end);
    if (portal_end < 0 || stmt_end < 0 || run_end < 0)
        Py_RETURN_FALSE;  /* on_front names the malformed message */
    Py_ssize_t name_end = -1, sql_end = -1;
    if (parsed) {
        name_end = nul(p, 5, ends[0]);
        sql_end = name_end < 0 ? -1 : nul(p, name_end + 1, ends[0]);
        if (name_end < 0 || sql_end < 0)
            Py_RETURN_FALSE;
    }

    PyObject *inflight = NULL, *statement_exec = NULL, *portal_exec = NULL, *counters = NULL;
    PyObject *result = NULL, *tmp = NULL, *key = NULL;
    if ((inflight = PyObject_GetAttr(st, s_inflight)) == NULL
        || (statement_exec = PyObject_GetAttr(st, s_statement_exec)) == NULL
        || (portal_exec = PyObject_GetAttr(st, s_portal_exec)) == NULL
        || (counters = PyObject_GetAttr(st, s_counters)) == NULL)
        goto done;
    if (!PyDict_Check(statement_exec) || !PyDict_Check(portal_exec) || !PyDict_Check(counters)) {
        PyErr_SetString(PyExc_TypeError, "SessionState maps must be dicts");
        goto done;
    }
    if (parsed) {
        PyObject *codec = PyObject_GetAttr(st, s_codec);
        if (codec == NULL)
            goto done;
        const char *codec_name = PyUnicode_AsUTF8(codec);
        PyObject *name = codec_name == NULL ? NULL
            : PyUnicode_Decode((const char *)p + 5, name_end - 5, codec_name, "surrogateescape");
        PyObject *raw = name == NULL ? NULL : PyBytes_FromStringAndSize((const char *)p, ends[0]);
        PyObject *item = raw == NULL ? NULL : PyObject_CallFunctionObjArgs(Pending, KIND_P, name, raw, NULL);
        Py_XDECREF(name);
        Py_XDECREF(raw);
        if (item == NULL) {
            Py_DECREF(codec);
            goto done;
        }
        tmp = PyObject_CallMethodOneArg(inflight, s_append, item);
        Py_DECREF(item);
        if (tmp == NULL) {
            Py_DECREF(codec);
            goto done;
        }
        Py_CLEAR(tmp);
        PyObject *sql = PyBytes_FromStringAndSize((const char *)p + name_end + 1, sql_end - name_end - 1);
        PyObject *exec_item = sql == NULL ? NULL : PyObject_CallFunctionObjArgs(execute_item_for, sql, codec, NULL);
        Py_XDECREF(sql);
        Py_DECREF(codec);
        if (exec_item == NULL)
            goto done;
        key = PyBytes_FromStringAndSize((const char *)p + 5, name_end - 5);
        int rc = key == NULL ? -1 : PyDict_SetItem(statement_exec, key, exec_item);
        Py_DECREF(exec_item);
        Py_CLEAR(key);
        if (rc < 0)
            goto done;
    }
    /* Bind: portal -> the statement's Execute item */
    PyObject *exec_item = lookup(statement_exec, p, portal_end + 1, stmt_end, UNKNOWN, NULL);
    if (exec_item == NULL)
        goto done;
    Py_INCREF(exec_item);
    key = PyBytes_FromStringAndSize((const char *)p + bind_at + 5, portal_end - bind_at - 5);
    int rc = key == NULL ? -1 : PyDict_SetItem(portal_exec, key, exec_item);
    Py_DECREF(exec_item);
    Py_CLEAR(key);
    if (rc < 0)
        goto done;
    if ((tmp = PyObject_CallMethodOneArg(inflight, s_append, BIND)) == NULL)
        goto done;
    Py_CLEAR(tmp);
    if (described) {
        if ((tmp = PyObject_CallMethodOneArg(inflight, s_append, DESCRIBE)) == NULL)
            goto done;
        Py_CLEAR(tmp);
    }
    /* Execute: the portal's item */
    exec_item = lookup(portal_exec, p, execute_at + 5, run_end, UNKNOWN, NULL);
    if (exec_item == NULL || (tmp = PyObject_CallMethodOneArg(inflight, s_append, exec_item)) == NULL)
        goto done;
    Py_CLEAR(tmp);
    if ((tmp = PyObject_CallMethodOneArg(inflight, s_append, SYNC)) == NULL)
        goto done;
    Py_CLEAR(tmp);
    PyObject *statements = PyDict_GetItemWithError(counters, STATEMENTS);
    if (statements == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyError, "statements");
        goto done;
    }
    PyObject *one = PyLong_FromLong(1);
    tmp = one == NULL ? NULL : PyNumber_Add(statements, one);
    Py_XDECREF(one);
    if (tmp == NULL || PyDict_SetItem(counters, STATEMENTS, tmp) < 0)
        goto done;
    Py_CLEAR(tmp);
    if (set_bool(st, s_unsynced, 0) < 0)
        goto done;
    result = Py_True;
    Py_INCREF(result);
done:
    Py_XDECREF(tmp);
    Py_XDECREF(inflight);
    Py_XDECREF(statement_exec);
    Py_XDECREF(portal_exec);
    Py_XDECREF(counters);
    return result;
}

/* Whether the deque item `item` has kind `kind` (a one-character str). -1 on error. */
static int
kind_is(PyObject *item, Py_UCS4 kind)
{
    PyObject *k = PyObject_GetAttr(item, s_kind);
    if (k == NULL)
        return -1;
    int same = PyUnicode_Check(k) && PyUnicode_GET_LENGTH(k) == 1 && PyUnicode_READ_CHAR(k, 0) == kind;
    Py_DECREF(k);
    return same;
}

/* A ReadyForQuery with status byte `status` ends the cycle: SessionState._end_cycle, its common
 * case (no copy-on-write layer, no cursor to drop) done here, the rest by the method itself. */
static int
end_cycle(PyObject *st, unsigned char status)
{
    PyObject *text = status == 'I' ? STATUS_I : status == 'T' ? STATUS_T : status == 'E' ? STATUS_E : NULL;
    PyObject *own = NULL;
    if (text == NULL) {
        own = text = PyUnicode_FromOrdinal(status);
        if (text == NULL)
            return -1;
    }
    int rc = -1, plain = 1;
    if (status == 'I') {
        PyObject *pending = PyObject_GetAttr(st, s_pending_tx);
        if (pending == NULL)
            goto out;
        plain = pending == Py_None;
        Py_DECREF(pending);
        if (plain) {
            PyObject *committed = PyObject_GetAttr(st, s_committed);
            PyObject *cursors = committed == NULL ? NULL : PyObject_GetAttr(committed, s_cursors);
            Py_XDECREF(committed);
            if (cursors == NULL)
                goto out;
            plain = PyAnySet_Check(cursors) && PySet_GET_SIZE(cursors) == 0;
            Py_DECREF(cursors);
        }
    }
    if (!plain) {
        PyObject *r = PyObject_CallMethodOneArg(st, s_end_cycle, text);
        if (r == NULL)
            goto out;
        Py_DECREF(r);
        rc = 0;
        goto out;
    }
    if (set_bool(st, s_cycle_error, 0) < 0 || PyObject_SetAttr(st, s_last_tag, EMPTY_BYTES) < 0
        || PyObject_SetAttr(st, s_txn_status, text) < 0)
        goto out;
    rc = 0;
out:
    Py_XDECREF(own);
    return rc;
}

/* Whether the in-flight items are exactly those of the request this answer answers; -1 on error. */
static int
inflight_matches(PyObject *inflight, int parsed, int described, PyObject **parse, PyObject **exec_item)
{
    Py_ssize_t depth = PyObject_Size(inflight);
    if (depth < 0)
        return -1;
    if (depth != parsed + 3 + described)
        return 0;
    PyObject *want[3] = {SYNC, described ? DESCRIBE : NULL, BIND};
    Py_ssize_t at[3] = {depth - 1, parsed + 1, parsed};
    for (int k = 0; k < 3; k++) {
        if (want[k] == NULL)
            continue;
        PyObject *item = PySequence_GetItem(inflight, at[k]);
        if (item == NULL)
            return -1;
        int same = item == want[k];
        Py_DECREF(item);
        if (!same)
            return 0;
    }
    if ((*exec_item = PySequence_GetItem(inflight, depth - 2)) == NULL)
        return -1;
    int ok = kind_is(*exec_item, 'E');
    if (ok <= 0 || !parsed)
        return ok;
    if ((*parse = PySequence_GetItem(inflight, 0)) == NULL)
        return -1;
    return kind_is(*parse, 'P');
}

/* Whether the statement `exec_item` completed with `tag` may have changed tracked state (then
 * on_command_complete applies it: the message-by-message path): 1, 0, -1 on error. */
static int
may_change_state(PyObject *exec_item, PyObject *tag)
{
    PyObject *sql = PyObject_GetAttr(exec_item, s_sql);
    if (sql == NULL)
        return -1;
    int has_sql = PyObject_IsTrue(sql);
    Py_DECREF(sql);
    if (has_sql <= 0)
        return has_sql;
    int tracked = PySet_Contains(TAGS, tag);
    if (tracked == 0 && PyBytes_GET_SIZE(tag) >= 7 && memcmp(PyBytes_AS_STRING(tag), "SELECT ", 7) == 0) {
        PyObject *creates = PyObject_GetAttr(exec_item, s_creates);  /* SELECT INTO, CREATE TABLE AS */
        if (creates == NULL)
            return -1;
        tracked = PyObject_IsTrue(creates);
        Py_DECREF(creates);
    }
    return tracked;
}

/* The confirmed Parse of the cycle: a prepared statement (PER-2 replay) or the unnamed one. */
static int
keep_parse(PyObject *st, PyObject *parse)
{
    PyObject *name = PyObject_GetAttr(parse, s_name);
    PyObject *raw = name == NULL ? NULL : PyObject_GetAttr(parse, s_raw);
    int rc = -1;
    if (raw != NULL) {
        int named = PyObject_IsTrue(name);
        if (named > 0) {
            PyObject *prepared = PyObject_GetAttr(st, s_prepared_parse);
            rc = prepared == NULL ? -1 : PyObject_SetItem(prepared, name, raw);
            Py_XDECREF(prepared);
        } else if (named == 0) {
            rc = PyObject_SetAttr(st, s_unnamed_parse, raw);
        }
    }
    Py_XDECREF(name);
    Py_XDECREF(raw);
    return rc;
}

static PyObject *
simple_answer(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (usable(nargs, "simple_answer(st, data)") < 0)
        return NULL;
    PyObject *st = args[0], *data = args[1];
    if (!PyBytes_CheckExact(data))
        return PyLong_FromLong(0);
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), stop, ends[MAX_ENTRIES];
    unsigned char kinds[MAX_ENTRIES];
    int count = walk(p, n, 'D', kinds, ends, &stop);
    if (count < 3)
        return PyLong_FromLong(0);
    /* [1] 2 [T|n] [D] C Z, the ReadyForQuery of its usual length */
    int parsed = kinds[0] == '1', i = parsed;
    if (kinds[i++] != '2')
        return PyLong_FromLong(0);
    int described = kinds[i] == 'T' || kinds[i] == 'n';
    if (described)
        i++;
    if (i < count && kinds[i] == 'D' && !(described && kinds[i - 1] == 'n'))
        i++;
    if (i + 2 != count || kinds[i] != 'C' || kinds[i + 1] != 'Z' || ends[count - 1] - ends[count - 2] != 6)
        return PyLong_FromLong(0);
    Py_ssize_t complete_at = ends[count - 3];
    Py_ssize_t tag_end = nul(p, complete_at + 5, ends[count - 2]);
    if (tag_end < 0)
        return PyLong_FromLong(0);

    PyObject *inflight = NULL, *parse = NULL, *exec_item = NULL, *tag = NULL, *tmp = NULL;
    Py_ssize_t taken = -1;  /* -1: an error; 0: not taken; else the offset past the ReadyForQuery */
    PyObject *injected = PyObject_GetAttr(st, s_injected);
    int flag = injected == NULL ? -1 : PyObject_IsTrue(injected);
    Py_XDECREF(injected);
    if (flag != 0) {  /* the proxy's own Parse may be in flight (or an error) */
        taken = flag < 0 ? -1 : 0;
        goto out;
    }
    if ((inflight = PyObject_GetAttr(st, s_inflight)) == NULL)
        goto out;
    flag = inflight_matches(inflight, parsed, described, &parse, &exec_item);
    if (flag <= 0) {
        taken = flag;
        goto out;
    }
    tag = PyBytes_FromStringAndSize((const char *)p + complete_at + 5, tag_end - complete_at - 5);
    flag = tag == NULL ? -1 : may_change_state(exec_item, tag);
    if (flag != 0) {
        taken = flag < 0 ? -1 : 0;
        goto out;
    }
    if (parse != NULL && keep_parse(st, parse) < 0)
        goto out;
    if ((tmp = PyObject_CallMethodNoArgs(inflight, s_clear)) == NULL)
        goto out;
    if (set_bool(st, s_rows_started, 0) < 0 || set_bool(st, s_copy_in_progress, 0) < 0
        || PyObject_SetAttr(st, s_last_tag, tag) < 0 || end_cycle(st, p[ends[count - 1] - 1]) < 0)
        goto out;
    taken = ends[count - 1];
out:
    Py_XDECREF(tmp);
    Py_XDECREF(tag);
    Py_XDECREF(exec_item);
    Py_XDECREF(parse);
    Py_XDECREF(inflight);
    return taken < 0 ? NULL : PyLong_FromSsize_t(taken);
}

static PyObject *
configure(PyObject *self, PyObject *args)
{
    PyObject *pending, *bind, *sync, *describe, *unknown, *exec_for, *tags;
    if (!PyArg_ParseTuple(args, "OOOOOOO!:configure", &pending, &bind, &sync, &describe, &unknown, &exec_for,
                          &PyFrozenSet_Type, &tags))
        return NULL;
    PyObject **slots[] = {&Pending, &BIND, &SYNC, &DESCRIBE, &UNKNOWN, &execute_item_for, &TAGS};
    PyObject *values[] = {pending, bind, sync, describe, unknown, exec_for, tags};
    for (size_t k = 0; k < sizeof(values) / sizeof(values[0]); k++) {
        Py_INCREF(values[k]);
        Py_XSETREF(*slots[k], values[k]);
    }
    Py_RETURN_NONE;
}

static int
intern_all(void)
{
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_inflight, "inflight"}, {&s_statement_exec, "statement_exec"}, {&s_portal_exec, "portal_exec"},
        {&s_counters, "counters"}, {&s_unsynced, "unsynced"}, {&s_codec, "codec"}, {&s_injected, "injected"},
        {&s_kind, "kind"}, {&s_name, "name"}, {&s_raw, "raw"}, {&s_sql, "sql"}, {&s_creates, "creates"},
        {&s_prepared_parse, "prepared_parse"}, {&s_unnamed_parse, "unnamed_parse"},
        {&s_rows_started, "rows_started"}, {&s_copy_in_progress, "copy_in_progress"},
        {&s_last_tag, "last_tag"}, {&s_pending_tx, "pending_tx"}, {&s_committed, "committed"},
        {&s_cursors, "cursors"}, {&s_cycle_error, "cycle_error"}, {&s_txn_status, "txn_status"},
        {&s_end_cycle, "_end_cycle"}, {&s_append, "append"}, {&s_clear, "clear"},
        {&STATUS_I, "I"}, {&STATUS_T, "T"}, {&STATUS_E, "E"}, {&KIND_P, "P"}, {&STATEMENTS, "statements"},
    };
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if ((*names[k].slot = PyUnicode_InternFromString(names[k].text)) == NULL)
            return -1;
    EMPTY_BYTES = PyBytes_FromStringAndSize("", 0);
    return EMPTY_BYTES == NULL ? -1 : 0;
}

PyMethodDef track_methods[] = {
    {"simple_request", (PyCFunction)(void (*)(void))simple_request, METH_FASTCALL,
     "simple_request(st, buf) -> bool: track [Parse,] Bind, [Describe,] Execute, Sync in one call."},
    {"simple_answer", (PyCFunction)(void (*)(void))simple_answer, METH_FASTCALL,
     "simple_answer(st, data) -> int: track its answer in one call; the offset past it, or 0."},
    {"configure", configure, METH_VARARGS,
     "configure(Pending, BIND, SYNC, DESCRIBE, EXECUTE_UNKNOWN, execute_item_for, TAGS)."},
    {NULL, NULL, 0, NULL},
};

int
track_init(void)
{
    return intern_all();
}
