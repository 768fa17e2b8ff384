/* Optional C accelerator for wire/: decodes and encodes generated messages by
 * interpreting the layout tables the generator writes beside the Python code
 * (each generated module's _accel_programs()).
 *
 * The pure-Python code is the reference. This module never reports an error of
 * its own: whenever it cannot finish (malformed or truncated input, a length over
 * a limit, a value it does not handle, any exception) it discards its work and
 * hands the call to the pure-Python method, which then succeeds or raises exactly
 * what it always raises. Every length the peer sends is still checked against the
 * bytes left and the DecodeLimits before anything is read or allocated.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ programs */

enum {
    OP_BOOL, OP_I8, OP_I16, OP_U16, OP_I32, OP_U32, OP_I64, OP_F64, OP_UUID,
    OP_STRING, OP_BYTES, OP_RECORDS, OP_STRUCT, OP_ARRAY
};
enum { ROLE_FIELD, ROLE_TAGGED, ROLE_ABSENT };
enum { DEF_CONST, DEF_LIST, DEF_NEW };

typedef struct Prog Prog;

typedef struct Op {
    int kind;
    int compact;
    int nullable;
    int maybe_none;
    Prog *sub;
    struct Op *elem;
} Op;

/* A default instance of a generated class (what Cls() makes), copied without
   running the dataclass __init__: immutable values are shared, empty lists are
   made anew and nested default instances are copied in turn. */
enum { T_SHARE, T_LIST, T_SUB };
typedef struct Tmpl {
    PyTypeObject *cls;
    PyObject *obj;
    Py_ssize_t n;
    Py_ssize_t *off;
    int *kind;
    struct Tmpl **sub;
} Tmpl;

typedef struct {
    int role;
    Py_ssize_t offset;
    Op op;
    int dkind;
    PyObject *dval; /* DEF_CONST: the value; DEF_NEW: the class */
    Tmpl *tmpl;     /* DEF_NEW, when the class allows it */
    int check;
    uint64_t tag;
} Field;

struct Prog {
    PyTypeObject *cls;
    int flex;
    int has_unknown;
    Py_ssize_t unknown_offset;
    Py_ssize_t nfields;
    Field *fields;
    Py_ssize_t ntagged;
    Py_ssize_t *tagged; /* field indexes, by tag */
};

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* Module state (one interpreter). */
static PyObject *program_for;      /* (cls, version) -> raw program or None */
static PyObject *pure_decode;      /* the pure-Python Message methods */
static PyObject *pure_decode_at;
static PyObject *pure_encode;
static PyObject *pure_encode_into;
static PyObject *file_region_type;
static PyTypeObject *uuid_type;
static PyObject *uuid_unknown;     /* SafeUUID.unknown */
static Py_ssize_t uuid_int_off, uuid_safe_off;
static PyObject *default_limits;
/* DEFAULT_LIMITS' values, read once in configure(): wire.primitives owns them. */
static Py_ssize_t default_max_array = 1000000, default_max_bytes = (Py_ssize_t)1 << 31;
static Py_ssize_t default_max_tags = 10000;
static PyObject *by_class;         /* cls -> {version: capsule or None} */
static PyObject *compiled;         /* id(raw) -> capsule */
static PyObject *keep;             /* raw programs kept alive */
static PyObject *str_length, *str_bytes;
static PyObject *str_max_array, *str_max_bytes, *str_max_tags;

static Py_ssize_t
member_offset(PyTypeObject *cls, const char *name)
{
    PyObject *d = PyDict_GetItemString(cls->tp_dict, name);
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a slot", cls->tp_name, name);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", cls->tp_name, name);
        return -1;
    }
    return m->offset;
}

static Prog *compile_prog(PyObject *raw);

static int
flag(PyObject *o)
{
    return PyObject_IsTrue(o);
}

static int
compile_op(PyObject *raw, Op *op)
{
    if (!PyTuple_Check(raw) || PyTuple_GET_SIZE(raw) < 1) {
        PyErr_SetString(PyExc_TypeError, "bad op");
        return -1;
    }
    const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(raw, 0));
    if (k == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(raw);
    memset(op, 0, sizeof(*op));
    static const struct { const char *name; int kind; } fixed[] = {
        {"bool", OP_BOOL}, {"int8", OP_I8}, {"int16", OP_I16}, {"uint16", OP_U16},
        {"int32", OP_I32}, {"uint32", OP_U32}, {"int64", OP_I64}, {"float64", OP_F64},
        {"uuid", OP_UUID},
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        if (strcmp(k, fixed[i].name) == 0) {
            op->kind = fixed[i].kind;
            return 0;
        }
    }
    if (strcmp(k, "string") == 0 && n == 3) {
        op->kind = OP_STRING;
    } else if (strcmp(k, "bytes") == 0 && n == 4) {
        op->kind = OP_BYTES;
        op->maybe_none = flag(PyTuple_GET_ITEM(raw, 3));
    } else if (strcmp(k, "records") == 0 && n == 3) {
        op->kind = OP_RECORDS;
    } else if (strcmp(k, "struct") == 0 && n == 3) {
        op->kind = OP_STRUCT;
        op->nullable = flag(PyTuple_GET_ITEM(raw, 2));
        op->sub = compile_prog(PyTuple_GET_ITEM(raw, 1));
        return op->sub == NULL ? -1 : 0;
    } else if (strcmp(k, "array") == 0 && n == 4) {
        op->kind = OP_ARRAY;
        op->compact = flag(PyTuple_GET_ITEM(raw, 1));
        op->nullable = flag(PyTuple_GET_ITEM(raw, 2));
        op->elem = PyMem_Calloc(1, sizeof(Op));
        if (op->elem == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        if (compile_op(PyTuple_GET_ITEM(raw, 3), op->elem) < 0)
            return -1;
        if (op->elem->kind == OP_ARRAY || op->elem->kind == OP_RECORDS) {
            PyErr_SetString(PyExc_TypeError, "unsupported array element");
            return -1;
        }
        return 0;
    } else {
        PyErr_Format(PyExc_TypeError, "unknown op %s", k);
        return -1;
    }
    op->compact = flag(PyTuple_GET_ITEM(raw, 1));
    op->nullable = flag(PyTuple_GET_ITEM(raw, 2));
    return 0;
}

static Tmpl *
make_tmpl(PyObject *cls, int depth)
{
    if (depth > 16 || !PyType_Check(cls) || ((PyTypeObject *)cls)->tp_dictoffset != 0)
        return NULL;
    PyObject *slots = PyDict_GetItemString(((PyTypeObject *)cls)->tp_dict, "__slots__");
    if (slots == NULL || !PyTuple_Check(slots)
        || PyDict_GetItemString(((PyTypeObject *)cls)->tp_dict, "__dataclass_fields__") == NULL)
        return NULL;
    PyObject *obj = PyObject_CallNoArgs(cls);
    if (obj == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(slots);
    Tmpl *t = PyMem_Calloc(1, sizeof(Tmpl));
    if (t == NULL)
        goto fail;
    t->cls = (PyTypeObject *)cls;
    t->obj = obj;
    t->n = n;
    t->off = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    t->kind = PyMem_Calloc(n ? n : 1, sizeof(int));
    t->sub = PyMem_Calloc(n ? n : 1, sizeof(Tmpl *));
    if (t->off == NULL || t->kind == NULL || t->sub == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(slots, i));
        if (name == NULL || (t->off[i] = member_offset(t->cls, name)) < 0)
            goto fail;
        PyObject *v = SLOT(obj, t->off[i]);
        if (v == NULL)
            goto fail;
        if (PyList_CheckExact(v)) {
            if (PyList_GET_SIZE(v) != 0)
                goto fail;
            t->kind[i] = T_LIST;
        } else if (PyLong_CheckExact(v) || PyUnicode_CheckExact(v) || PyBytes_CheckExact(v)
                   || PyFloat_CheckExact(v) || PyBool_Check(v) || v == Py_None
                   || Py_IS_TYPE(v, uuid_type)) {
            t->kind[i] = T_SHARE;
        } else {
            t->sub[i] = make_tmpl((PyObject *)Py_TYPE(v), depth + 1);
            if (t->sub[i] == NULL)
                goto fail;
            t->kind[i] = T_SUB;
        }
    }
    Py_INCREF(cls);
    return t;
fail:
    /* Not copyable: the default is made by calling the class (leaked parts are tiny). */
    PyErr_Clear();
    return NULL;
}

static PyObject *
clone_tmpl(const Tmpl *t)
{
    PyObject *o = t->cls->tp_alloc(t->cls, 0);
    if (o == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        PyObject *v;
        if (t->kind[i] == T_SHARE) {
            v = SLOT(t->obj, t->off[i]);
            Py_INCREF(v);
        } else if (t->kind[i] == T_LIST) {
            v = PyList_New(0);
        } else {
            v = clone_tmpl(t->sub[i]);
        }
        if (v == NULL) {
            Py_DECREF(o);
            return NULL;
        }
        SLOT(o, t->off[i]) = v;
    }
    return o;
}

/* v == Cls() for a v of exactly that class, as the dataclass __eq__ decides it. */
static int
equals_tmpl(const Tmpl *t, PyObject *v)
{
    for (Py_ssize_t i = 0; i < t->n; i++) {
        PyObject *a = SLOT(v, t->off[i]);
        if (a == NULL)
            return -1;
        Py_INCREF(a);
        int r = PyObject_RichCompareBool(a, SLOT(t->obj, t->off[i]), Py_EQ);
        Py_DECREF(a);
        if (r != 1)
            return r;
    }
    return 1;
}

static int
compile_default(PyObject *kind, PyObject *value, Field *f)
{
    const char *k = PyUnicode_AsUTF8(kind);
    if (k == NULL)
        return -1;
    if (strcmp(k, "const") == 0)
        f->dkind = DEF_CONST;
    else if (strcmp(k, "list") == 0)
        f->dkind = DEF_LIST;
    else if (strcmp(k, "new") == 0) {
        f->dkind = DEF_NEW;
        f->tmpl = make_tmpl(value, 0);
    }
    else {
        PyErr_SetString(PyExc_TypeError, "bad default kind");
        return -1;
    }
    Py_INCREF(value);
    f->dval = value;
    return 0;
}

static Prog *
compile_prog(PyObject *raw)
{
    PyObject *key = PyLong_FromVoidPtr(raw);
    if (key == NULL)
        return NULL;
    PyObject *cap = PyDict_GetItemWithError(compiled, key);
    if (cap != NULL) {
        Py_DECREF(key);
        return PyCapsule_GetPointer(cap, NULL);
    }
    if (PyErr_Occurred() || PyList_Append(keep, raw) < 0) {
        Py_DECREF(key);
        return NULL;
    }
    /* Programs are kept for the life of the process: no destructor. */
    Prog *pr = PyMem_Calloc(1, sizeof(Prog));
    if (pr == NULL) {
        Py_DECREF(key);
        PyErr_NoMemory();
        return NULL;
    }
    cap = PyCapsule_New(pr, NULL, NULL);
    if (cap == NULL || PyDict_SetItem(compiled, key, cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(key);
        return NULL;
    }
    Py_DECREF(cap);
    Py_DECREF(key);
    if (!PyTuple_Check(raw) || PyTuple_GET_SIZE(raw) != 4 || !PyType_Check(PyTuple_GET_ITEM(raw, 0))
        || !PyTuple_Check(PyTuple_GET_ITEM(raw, 2))) {
        PyErr_SetString(PyExc_TypeError, "bad program");
        return NULL;
    }
    pr->cls = (PyTypeObject *)PyTuple_GET_ITEM(raw, 0);
    if (pr->cls->tp_alloc == NULL || pr->cls->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "class is not slotted");
        return NULL;
    }
    pr->flex = flag(PyTuple_GET_ITEM(raw, 1));
    pr->has_unknown = flag(PyTuple_GET_ITEM(raw, 3));
    if (pr->has_unknown) {
        pr->unknown_offset = member_offset(pr->cls, "unknown_tagged_fields");
        if (pr->unknown_offset < 0)
            return NULL;
    }
    PyObject *fields = PyTuple_GET_ITEM(raw, 2);
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    pr->fields = PyMem_Calloc(n ? n : 1, sizeof(Field));
    pr->tagged = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    if (pr->fields == NULL || pr->tagged == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *rf = PyTuple_GET_ITEM(fields, i);
        Field *f = &pr->fields[i];
        if (!PyTuple_Check(rf) || PyTuple_GET_SIZE(rf) < 3) {
            PyErr_SetString(PyExc_TypeError, "bad field");
            return NULL;
        }
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(rf, 0));
        const char *role = PyUnicode_AsUTF8(PyTuple_GET_ITEM(rf, 1));
        if (name == NULL || role == NULL)
            return NULL;
        f->offset = member_offset(pr->cls, name);
        if (f->offset < 0)
            return NULL;
        Py_ssize_t m = PyTuple_GET_SIZE(rf);
        if (strcmp(role, "field") == 0 && m == 3) {
            f->role = ROLE_FIELD;
            if (compile_op(PyTuple_GET_ITEM(rf, 2), &f->op) < 0)
                return NULL;
        } else if (strcmp(role, "tagged") == 0 && m == 6) {
            f->role = ROLE_TAGGED;
            if (compile_op(PyTuple_GET_ITEM(rf, 2), &f->op) < 0
                || compile_default(PyTuple_GET_ITEM(rf, 3), PyTuple_GET_ITEM(rf, 4), f) < 0)
                return NULL;
            f->tag = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(rf, 5));
            if (PyErr_Occurred())
                return NULL;
            /* Insert by tag. */
            Py_ssize_t j = pr->ntagged++;
            while (j > 0 && pr->fields[pr->tagged[j - 1]].tag > f->tag) {
                pr->tagged[j] = pr->tagged[j - 1];
                j--;
            }
            pr->tagged[j] = i;
        } else if (strcmp(role, "absent") == 0 && m == 5) {
            f->role = ROLE_ABSENT;
            if (compile_default(PyTuple_GET_ITEM(rf, 2), PyTuple_GET_ITEM(rf, 3), f) < 0)
                return NULL;
            f->check = flag(PyTuple_GET_ITEM(rf, 4));
        } else {
            PyErr_SetString(PyExc_TypeError, "bad field role");
            return NULL;
        }
    }
    pr->nfields = n;
    return pr;
}

/* The program for (cls, version), or NULL with no error set when there is none. */
static Prog *
lookup(PyObject *cls, PyObject *version)
{
    if (!PyLong_CheckExact(version) || program_for == NULL)
        return NULL;
    PyObject *table = PyDict_GetItemWithError(by_class, cls);
    if (table == NULL) {
        if (PyErr_Occurred())
            goto error;
        table = PyDict_New();
        if (table == NULL || PyDict_SetItem(by_class, cls, table) < 0) {
            Py_XDECREF(table);
            goto error;
        }
        Py_DECREF(table);
    }
    PyObject *cap = PyDict_GetItemWithError(table, version);
    if (cap == NULL) {
        if (PyErr_Occurred())
            goto error;
        PyObject *raw = PyObject_CallFunctionObjArgs(program_for, cls, version, NULL);
        if (raw == NULL)
            goto error;
        if (raw == Py_None) {
            cap = Py_None;
            Py_INCREF(cap);
        } else {
            Prog *pr = compile_prog(raw);
            if (pr == NULL) {
                Py_DECREF(raw);
                goto error;
            }
            cap = PyCapsule_New(pr, NULL, NULL);
        }
        Py_DECREF(raw);
        if (cap == NULL || PyDict_SetItem(table, version, cap) < 0) {
            Py_XDECREF(cap);
            goto error;
        }
        Py_DECREF(cap);
    }
    if (cap == Py_None)
        return NULL;
    return PyCapsule_GetPointer(cap, NULL);
error:
    /* A table that does not compile is a bug in the generator: say so once, then
       leave this (class, version) to the pure-Python code. */
    PyErr_WriteUnraisable(cls);
    if (PyDict_Check(by_class)) {
        PyObject *table2 = PyDict_GetItem(by_class, cls);
        if (table2 != NULL)
            PyDict_SetItem(table2, version, Py_None);
    }
    PyErr_Clear();
    return NULL;
}

/* ------------------------------------------------------------------ decoding */

typedef struct {
    const unsigned char *b;
    PyObject *source;  /* what memoryview slices are taken from (made lazily) */
    PyObject *mv;
    int source_is_mv;
    Py_ssize_t max_array, max_bytes, max_tags;
    /* The last large integer made: offsets and watermarks repeat within a message. */
    long long last_int;
    PyObject *last_obj;
} DCtx;

#define FAIL (-1)

static inline int16_t rd16(const unsigned char *p) { return (int16_t)((p[0] << 8) | p[1]); }
static inline uint16_t rdu16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static inline uint32_t rdu32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t rdu64(const unsigned char *p)
{
    return ((uint64_t)rdu32(p) << 32) | rdu32(p + 4);
}

/* Kafka's unsigned varint: at most 5 bytes, at most 32 bits. */
static inline Py_ssize_t
uvarint(const unsigned char *b, Py_ssize_t p, Py_ssize_t e, uint64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    while (1) {
        if (p >= e)
            return FAIL;
        unsigned x = b[p++];
        v |= (uint64_t)(x & 0x7F) << shift;
        if (x < 0x80) {
            if (v > 0xFFFFFFFFu)
                return FAIL;
            *out = v;
            return p;
        }
        shift += 7;
        if (shift > 28)
            return FAIL;
    }
}

static PyObject *dec_struct(DCtx *c, Prog *pr, Py_ssize_t *pp, Py_ssize_t e);

static PyObject *
make_uuid(const unsigned char *p)
{
    PyObject *v = _PyLong_FromByteArray(p, 16, 0, 0);
    if (v == NULL)
        return NULL;
    PyObject *u = uuid_type->tp_alloc(uuid_type, 0);
    if (u == NULL) {
        Py_DECREF(v);
        return NULL;
    }
    SLOT(u, uuid_int_off) = v;
    Py_INCREF(uuid_unknown);
    SLOT(u, uuid_safe_off) = uuid_unknown;
    return u;
}

static PyObject *
dec_int(DCtx *c, long long v)
{
    if (v >= -5 && v <= 256)
        return PyLong_FromLongLong(v);
    if (c->last_obj != NULL && c->last_int == v) {
        Py_INCREF(c->last_obj);
        return c->last_obj;
    }
    PyObject *r = PyLong_FromLongLong(v);
    if (r != NULL) {
        Py_XSETREF(c->last_obj, r);
        Py_INCREF(r);
        c->last_int = v;
    }
    return r;
}

static PyObject *
dec_fixed(DCtx *c, int kind, const unsigned char *p)
{
    switch (kind) {
    case OP_I32: return dec_int(c, (int32_t)rdu32(p));
    case OP_I64: return dec_int(c, (int64_t)rdu64(p));
    case OP_BOOL: return PyBool_FromLong(p[0] != 0);
    case OP_I8: return PyLong_FromLong((int8_t)p[0]);
    case OP_I16: return PyLong_FromLong(rd16(p));
    case OP_U16: return PyLong_FromLong(rdu16(p));
    case OP_U32: return PyLong_FromUnsignedLong(rdu32(p));
    case OP_F64: return PyFloat_FromDouble(PyFloat_Unpack8((const char *)p, 0));
    case OP_UUID: return make_uuid(p);
    }
    return NULL;
}

static const int fixed_size[] = {1, 1, 2, 2, 4, 4, 8, 8, 16};

/* A length of a string, bytes or records field; sets *isnull for a null one.
   Returns the new position, or FAIL. */
static inline Py_ssize_t
read_len(const unsigned char *b, Py_ssize_t p, Py_ssize_t e, int compact, int wide, int64_t *n)
{
    if (compact) {
        uint64_t v;
        p = uvarint(b, p, e, &v);
        if (p < 0)
            return FAIL;
        *n = (int64_t)v - 1;
        return p;
    }
    if (wide) {
        if (e - p < 4)
            return FAIL;
        *n = (int32_t)rdu32(b + p);
        return p + 4;
    }
    if (e - p < 2)
        return FAIL;
    *n = rd16(b + p);
    return p + 2;
}

static PyObject *
slice_records(DCtx *c, Py_ssize_t start, Py_ssize_t stop)
{
    if (c->mv == NULL) {
        if (c->source_is_mv) {
            c->mv = c->source;
            Py_INCREF(c->mv);
        } else {
            c->mv = PyMemoryView_FromObject(c->source);
            if (c->mv == NULL)
                return NULL;
        }
    }
    /* What mv[start:stop] does for a one-dimensional byte view: a new view on the
       same managed buffer, its start and length moved. */
    PyObject *r = PyMemoryView_FromObject(c->mv);
    if (r == NULL)
        return NULL;
    Py_buffer *v = PyMemoryView_GET_BUFFER(r);
    if (v->ndim != 1 || v->itemsize != 1 || v->shape == NULL || v->strides == NULL
        || v->strides[0] != 1 || v->buf != (void *)c->b) {
        Py_DECREF(r);
        return NULL;
    }
    v->buf = (char *)c->b + start;
    v->len = stop - start;
    v->shape[0] = stop - start;
    return r;
}

static PyObject *
dec_op(DCtx *c, const Op *op, Py_ssize_t *pp, Py_ssize_t e)
{
    const unsigned char *b = c->b;
    Py_ssize_t p = *pp;
    int64_t n;
    PyObject *r;
    switch (op->kind) {
    case OP_BOOL: case OP_I8: case OP_I16: case OP_U16: case OP_I32:
    case OP_U32: case OP_I64: case OP_F64: case OP_UUID: {
        int size = fixed_size[op->kind];
        if (e - p < size)
            return NULL;
        r = dec_fixed(c, op->kind, b + p);
        *pp = p + size;
        return r;
    }
    case OP_STRING:
        if (op->compact) {
            uint64_t v;
            p = uvarint(b, p, e, &v);
            if (p < 0)
                return NULL;
            if (v == 0) {
                if (!op->nullable)
                    return NULL;
                *pp = p;
                Py_RETURN_NONE;
            }
            n = (int64_t)v - 1;
            if (n > e - p || n > 0x7FFF)
                return NULL;
        } else {
            if (e - p < 2)
                return NULL;
            n = rd16(b + p);
            p += 2;
            if (n < 0) {
                if (n == -1 && op->nullable) {
                    *pp = p;
                    Py_RETURN_NONE;
                }
                return NULL;
            }
            if (n > e - p)
                return NULL;
        }
        r = PyUnicode_DecodeUTF8((const char *)b + p, (Py_ssize_t)n, NULL);
        *pp = p + (Py_ssize_t)n;
        return r;
    case OP_BYTES:
    case OP_RECORDS:
        p = read_len(b, p, e, op->compact, 1, &n);
        if (p < 0)
            return NULL;
        if (n < 0) {
            if (n == -1 && op->nullable) {
                *pp = p;
                Py_RETURN_NONE;
            }
            return NULL;
        }
        if (n > e - p || n > c->max_bytes)
            return NULL;
        if (op->kind == OP_BYTES)
            r = PyBytes_FromStringAndSize((const char *)b + p, (Py_ssize_t)n);
        else
            r = slice_records(c, p, p + (Py_ssize_t)n);
        *pp = p + (Py_ssize_t)n;
        return r;
    case OP_STRUCT:
        if (op->nullable) {
            if (p >= e)
                return NULL;
            if (b[p] >= 0x80) {
                *pp = p + 1;
                Py_RETURN_NONE;
            }
            *pp = p + 1;
        }
        return dec_struct(c, op->sub, pp, e);
    case OP_ARRAY: {
        if (op->compact && p < e && b[p] > 0 && b[p] < 0x80 && b[p] <= e - p && b[p] - 1 <= c->max_array) {
            /* A one-byte length: the fast path of the Python code, under the same limits. */
            n = b[p] - 1;
            p += 1;
        } else {
            if (op->compact) {
                uint64_t v;
                p = uvarint(b, p, e, &v);
                if (p < 0)
                    return NULL;
                n = (int64_t)v - 1;
            } else {
                if (e - p < 4)
                    return NULL;
                n = (int32_t)rdu32(b + p);
                p += 4;
            }
            if (n < 0) {
                if (n == -1 && op->nullable) {
                    *pp = p;
                    Py_RETURN_NONE;
                }
                return NULL;
            }
            if (n > e - p || n > c->max_array)
                return NULL;
        }
        const Op *el = op->elem;
        if (el->kind <= OP_UUID && (int64_t)fixed_size[el->kind] * n > e - p)
            return NULL;
        PyObject *list = PyList_New((Py_ssize_t)n);
        if (list == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *x = dec_op(c, el, &p, e);
            if (x == NULL) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, i, x);
        }
        *pp = p;
        return list;
    }
    }
    return NULL;
}

static PyObject *
make_default(const Field *f)
{
    switch (f->dkind) {
    case DEF_CONST:
        Py_INCREF(f->dval);
        return f->dval;
    case DEF_LIST:
        return PyList_New(0);
    default:
        if (f->tmpl != NULL)
            return clone_tmpl(f->tmpl);
        return PyObject_CallNoArgs(f->dval);
    }
}

static PyObject *
dec_struct(DCtx *c, Prog *pr, Py_ssize_t *pp, Py_ssize_t e)
{
    const unsigned char *b = c->b;
    Py_ssize_t p = *pp;
    PyObject *obj = pr->cls->tp_alloc(pr->cls, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < pr->nfields; i++) {
        Field *f = &pr->fields[i];
        if (f->role != ROLE_FIELD)
            continue;
        PyObject *v = dec_op(c, &f->op, &p, e);
        if (v == NULL)
            goto fail;
        SLOT(obj, f->offset) = v;
    }
    PyObject *unknown = NULL;
    if (pr->flex) {
        uint64_t nt;
        if (p < e && b[p] == 0) {
            nt = 0;
            p += 1;
        } else {
            Py_ssize_t q = uvarint(b, p, e, &nt);
            if (q < 0)
                goto fail;
            /* Each tagged field takes at least two bytes (tag and size). */
            if (nt * 2 > (uint64_t)(e - q) || nt > (uint64_t)c->max_tags)
                goto fail;
            p = q;
        }
        for (uint64_t k = 0; k < nt; k++) {
            uint64_t tag, size;
            p = uvarint(b, p, e, &tag);
            if (p < 0)
                goto fail_unknown;
            p = uvarint(b, p, e, &size);
            if (p < 0 || size > (uint64_t)(e - p))
                goto fail_unknown;
            Py_ssize_t q = p + (Py_ssize_t)size;
            Field *known = NULL;
            for (Py_ssize_t j = 0; j < pr->ntagged; j++) {
                if (pr->fields[pr->tagged[j]].tag == tag) {
                    known = &pr->fields[pr->tagged[j]];
                    break;
                }
            }
            if (known != NULL) {
                PyObject *v = dec_op(c, &known->op, &p, q);
                if (v == NULL)
                    goto fail_unknown;
                if (p != q) {
                    Py_DECREF(v);
                    goto fail_unknown;
                }
                PyObject *old = SLOT(obj, known->offset);
                SLOT(obj, known->offset) = v;
                Py_XDECREF(old);
            } else {
                if (unknown == NULL && (unknown = PyList_New(0)) == NULL)
                    goto fail;
                PyObject *item = Py_BuildValue("(Ky#)", (unsigned long long)tag,
                                               (const char *)b + p, (Py_ssize_t)size);
                if (item == NULL || PyList_Append(unknown, item) < 0) {
                    Py_XDECREF(item);
                    goto fail_unknown;
                }
                Py_DECREF(item);
            }
            p = q;
        }
    }
    for (Py_ssize_t i = 0; i < pr->nfields; i++) {
        Field *f = &pr->fields[i];
        if (f->role == ROLE_FIELD || SLOT(obj, f->offset) != NULL)
            continue;
        PyObject *v = make_default(f);
        if (v == NULL)
            goto fail_unknown;
        SLOT(obj, f->offset) = v;
    }
    if (pr->has_unknown) {
        if (unknown == NULL) {
            Py_INCREF(Py_None);
            unknown = Py_None;
        }
        SLOT(obj, pr->unknown_offset) = unknown;
    } else {
        Py_XDECREF(unknown);
    }
    *pp = p;
    return obj;
fail_unknown:
    Py_XDECREF(unknown);
fail:
    Py_DECREF(obj);
    return NULL;
}

typedef struct {
    Py_buffer view;
    int has_view;
    DCtx c;
    Py_ssize_t len;
} Input;

/* Sets up decoding of a bytes, bytearray or one-dimensional byte memoryview.
   Returns 0, or -1 (no error set) when the pure code should take the call. */
static int
input_open(Input *in, PyObject *data, PyObject *limits)
{
    memset(in, 0, sizeof(*in));
    if (PyBytes_CheckExact(data)) {
        in->c.b = (const unsigned char *)PyBytes_AS_STRING(data);
        in->len = PyBytes_GET_SIZE(data);
        in->c.source = data;
    } else if (PyByteArray_CheckExact(data) || PyMemoryView_Check(data)) {
        if (PyMemoryView_Check(data)) {
            Py_buffer *v = PyMemoryView_GET_BUFFER(data);
            if (v->ndim != 1 || v->itemsize != 1 || v->format == NULL || strcmp(v->format, "B") != 0
                || v->strides == NULL || v->strides[0] != 1)
                return -1;
            in->c.source_is_mv = 1;
        }
        if (PyObject_GetBuffer(data, &in->view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            return -1;
        }
        in->has_view = 1;
        in->c.b = in->view.buf;
        in->len = in->view.len;
        in->c.source = data;
    } else {
        return -1;
    }
    if (limits == default_limits || limits == NULL) {
        in->c.max_array = default_max_array;
        in->c.max_bytes = default_max_bytes;
        in->c.max_tags = default_max_tags;
    } else {
        PyObject *a = PyObject_GetAttr(limits, str_max_array);
        PyObject *bb = a ? PyObject_GetAttr(limits, str_max_bytes) : NULL;
        PyObject *t = bb ? PyObject_GetAttr(limits, str_max_tags) : NULL;
        int ok = t && PyLong_CheckExact(a) && PyLong_CheckExact(bb) && PyLong_CheckExact(t);
        if (ok) {
            in->c.max_array = PyLong_AsSsize_t(a);
            in->c.max_bytes = PyLong_AsSsize_t(bb);
            in->c.max_tags = PyLong_AsSsize_t(t);
            ok = !PyErr_Occurred() && in->c.max_array >= 0 && in->c.max_bytes >= 0 && in->c.max_tags >= 0;
        }
        Py_XDECREF(a);
        Py_XDECREF(bb);
        Py_XDECREF(t);
        if (!ok) {
            PyErr_Clear();
            if (in->has_view)
                PyBuffer_Release(&in->view);
            in->has_view = 0;
            return -1;
        }
    }
    return 0;
}

static void
input_close(Input *in)
{
    Py_CLEAR(in->c.mv);
    Py_CLEAR(in->c.last_obj);
    if (in->has_view)
        PyBuffer_Release(&in->view);
    in->has_view = 0;
}

/* Positional and keyword arguments, the way the Python signatures take them. */
static int
parse_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, const char *const *names,
           Py_ssize_t required, Py_ssize_t total, PyObject **out)
{
    if (nargs > total)
        return -1;
    for (Py_ssize_t i = 0; i < total; i++)
        out[i] = i < nargs ? args[i] : NULL;
    if (kwnames != NULL) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); k++) {
            const char *kn = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
            if (kn == NULL) {
                PyErr_Clear();
                return -1;
            }
            Py_ssize_t i = 0;
            while (i < total && strcmp(names[i], kn) != 0)
                i++;
            if (i == total || out[i] != NULL)
                return -1;
            out[i] = args[nargs + k];
        }
    }
    for (Py_ssize_t i = 0; i < required; i++)
        if (out[i] == NULL)
            return -1;
    return 0;
}

static PyObject *
call_pure(PyObject *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return PyObject_Vectorcall(fn, args, nargs, kwnames);
}

/* Calls the accelerator finished, and calls it gave up on (for tests). */
static unsigned long long n_done, n_handed_back;

static PyObject *
hand_back(PyObject *fn, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    n_handed_back++;
    PyErr_Clear();
    return PyObject_Vectorcall(fn, args, nargs, kwnames);
}

static PyObject *
sp_counters(PyObject *module, PyObject *noargs)
{
    return Py_BuildValue("(KK)", n_done, n_handed_back);
}

/* decode(cls, data, version, limits=DEFAULT_LIMITS) */
static PyObject *
sp_decode(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"cls", "data", "version", "limits"};
    PyObject *a[4];
    if (parse_args(args, nargs, kwnames, names, 3, 4, a) < 0)
        return call_pure(pure_decode, args, nargs, kwnames);
    Prog *pr = lookup(a[0], a[2]);
    Input in;
    if (pr == NULL || (PyObject *)pr->cls != a[0] || input_open(&in, a[1], a[3]) < 0)
        return call_pure(pure_decode, args, nargs, kwnames);
    Py_ssize_t p = 0;
    /* Many objects are made at once: collect once afterwards, not every 700. */
    int gc_was = PyGC_Disable();
    PyObject *obj = dec_struct(&in.c, pr, &p, in.len);
    if (gc_was)
        PyGC_Enable();
    input_close(&in);
    if (obj == NULL)
        return hand_back(pure_decode, args, nargs, kwnames);
    n_done++;
    return obj;
}

/* decode_at(cls, buf, pos, version, limits=DEFAULT_LIMITS, end=None) */
static PyObject *
sp_decode_at(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"cls", "buf", "pos", "version", "limits", "end"};
    PyObject *a[6];
    if (parse_args(args, nargs, kwnames, names, 4, 6, a) < 0 || !PyMemoryView_Check(a[1])
        || !PyLong_CheckExact(a[2]) || (a[5] != NULL && a[5] != Py_None && !PyLong_CheckExact(a[5])))
        return call_pure(pure_decode_at, args, nargs, kwnames);
    Prog *pr = lookup(a[0], a[3]);
    Input in;
    if (pr == NULL || (PyObject *)pr->cls != a[0] || input_open(&in, a[1], a[4]) < 0)
        return call_pure(pure_decode_at, args, nargs, kwnames);
    Py_ssize_t pos = PyLong_AsSsize_t(a[2]);
    Py_ssize_t end = (a[5] == NULL || a[5] == Py_None) ? in.len : PyLong_AsSsize_t(a[5]);
    if (PyErr_Occurred() || pos < 0 || end < pos || end > in.len) {
        PyErr_Clear();
        input_close(&in);
        return call_pure(pure_decode_at, args, nargs, kwnames);
    }
    int gc_was = PyGC_Disable();
    PyObject *obj = dec_struct(&in.c, pr, &pos, end);
    if (gc_was)
        PyGC_Enable();
    input_close(&in);
    if (obj == NULL)
        return hand_back(pure_decode_at, args, nargs, kwnames);
    n_done++;
    PyObject *r = PyTuple_New(2);
    PyObject *pl = PyLong_FromSsize_t(pos);
    if (r == NULL || pl == NULL) {
        Py_XDECREF(r);
        Py_XDECREF(pl);
        Py_DECREF(obj);
        return NULL;
    }
    PyTuple_SET_ITEM(r, 0, obj);
    PyTuple_SET_ITEM(r, 1, pl);
    return r;
}

/* ------------------------------------------------------------------ encoding */

enum { W_RAW, W_BYTES };

typedef struct {
    int mode;
    PyObject *obj;   /* W_BYTES: the bytes object being filled */
    char *buf;
    Py_ssize_t len, cap;
    Py_ssize_t base; /* position of this writer's start in the output bytearray */
    PyObject *regions; /* list of (position, region); NULL where regions cannot go */
    Py_ssize_t reference_from; /* with regions: record buffers this long or longer are
                                  referenced there, not copied; -1: always copied */
} Writer;

static int
w_grow(Writer *w, Py_ssize_t need)
{
    if (need > PY_SSIZE_T_MAX / 2 - w->len)
        return -1;
    Py_ssize_t cap = w->len + need;
    cap += (cap >> 3) + 256;
    if (w->mode == W_RAW) {
        char *nb = PyMem_Realloc(w->buf, cap);
        if (nb == NULL)
            return -1;
        w->buf = nb;
    } else if (w->mode == W_BYTES) {
        if (_PyBytes_Resize(&w->obj, cap) < 0)
            return -1;
        w->buf = PyBytes_AS_STRING(w->obj);
    } else {
        return -1;
    }
    w->cap = cap;
    return 0;
}

#define ENSURE(w, n) do { if ((w)->cap - (w)->len < (Py_ssize_t)(n) && w_grow((w), (n)) < 0) return -1; } while (0)

static inline int
w_put(Writer *w, const void *src, Py_ssize_t n)
{
    if (n == 0)
        return 0;
    ENSURE(w, n);
    memcpy(w->buf + w->len, src, n);
    w->len += n;
    return 0;
}

static inline int
w_byte(Writer *w, unsigned char x)
{
    ENSURE(w, 1);
    w->buf[w->len++] = (char)x;
    return 0;
}

static inline int
w_uvarint(Writer *w, uint64_t v)
{
    ENSURE(w, 10);
    while (v >= 0x80) {
        w->buf[w->len++] = (char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    w->buf[w->len++] = (char)v;
    return 0;
}

static inline int
w_be(Writer *w, uint64_t v, int size)
{
    ENSURE(w, size);
    for (int i = size - 1; i >= 0; i--) {
        w->buf[w->len + i] = (char)(v & 0xFF);
        v >>= 8;
    }
    w->len += size;
    return 0;
}

static int
enc_fixed(Writer *w, int kind, PyObject *v)
{
    if (kind == OP_BOOL) {
        int t = PyObject_IsTrue(v);
        if (t < 0)
            return -1;
        return w_byte(w, (unsigned char)t);
    }
    if (kind == OP_F64) {
        double d;
        if (PyFloat_Check(v))
            d = PyFloat_AS_DOUBLE(v);
        else if (PyLong_Check(v)) {
            d = PyLong_AsDouble(v);
            if (d == -1.0 && PyErr_Occurred())
                return -1;
        } else
            return -1;
        ENSURE(w, 8);
        if (PyFloat_Pack8(d, w->buf + w->len, 0) < 0)
            return -1;
        w->len += 8;
        return 0;
    }
    if (kind == OP_UUID) {
        unsigned char raw[16];
        if (Py_IS_TYPE(v, uuid_type)) {
            PyObject *i = SLOT(v, uuid_int_off);
            if (i == NULL || !PyLong_CheckExact(i))
                return -1;
#if PY_VERSION_HEX >= 0x030D0000
            if (_PyLong_AsByteArray((PyLongObject *)i, raw, 16, 0, 0, 1) < 0)
#else
            if (_PyLong_AsByteArray((PyLongObject *)i, raw, 16, 0, 0) < 0)
#endif
                return -1;
            return w_put(w, raw, 16);
        }
        PyObject *bs = PyObject_GetAttr(v, str_bytes);
        if (bs == NULL)
            return -1;
        int rc = -1;
        if (PyBytes_CheckExact(bs) && PyBytes_GET_SIZE(bs) == 16)
            rc = w_put(w, PyBytes_AS_STRING(bs), 16);
        Py_DECREF(bs);
        return rc;
    }
    if (!PyLong_Check(v))
        return -1;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()))
        return -1;
    switch (kind) {
    case OP_I8:
        if (x < -128 || x > 127) return -1;
        return w_byte(w, (unsigned char)x);
    case OP_I16:
        if (x < -32768 || x > 32767) return -1;
        return w_be(w, (uint64_t)x, 2);
    case OP_U16:
        if (x < 0 || x > 65535) return -1;
        return w_be(w, (uint64_t)x, 2);
    case OP_I32:
        if (x < INT32_MIN || x > INT32_MAX) return -1;
        return w_be(w, (uint64_t)x, 4);
    case OP_U32:
        if (x < 0 || x > (long long)UINT32_MAX) return -1;
        return w_be(w, (uint64_t)x, 4);
    case OP_I64:
        return w_be(w, (uint64_t)x, 8);
    }
    return -1;
}

static int
enc_len(Writer *w, int compact, Py_ssize_t n, int wide)
{
    if (compact)
        return w_uvarint(w, (uint64_t)n + 1);
    if (wide) {
        if (n > INT32_MAX)
            return -1;
        return w_be(w, (uint64_t)n, 4);
    }
    if (n > 0x7FFF)
        return -1;
    return w_be(w, (uint64_t)n, 2);
}

static int
enc_null(Writer *w, int compact, int wide)
{
    if (compact)
        return w_byte(w, 0);
    return w_put(w, "\xff\xff\xff\xff", wide ? 4 : 2);
}

static int enc_struct(Writer *w, Prog *pr, PyObject *o);

/* Appends the bytes of bytes, bytearray or a contiguous memoryview; with
   any_format, a memoryview of any item format counts by its bytes (records). */
static int
enc_buffer(Writer *w, PyObject *v, int compact, int any_format)
{
    if (PyBytes_Check(v)) {
        if (enc_len(w, compact, PyBytes_GET_SIZE(v), 1) < 0)
            return -1;
        return w_put(w, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    }
    if (!PyByteArray_Check(v) && !PyMemoryView_Check(v))
        return -1;
    if (PyMemoryView_Check(v) && !any_format) {
        Py_buffer *mv = PyMemoryView_GET_BUFFER(v);
        if (mv->ndim != 1 || mv->itemsize != 1)
            return -1;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0)
        return -1;
    int rc = enc_len(w, compact, view.len, 1);
    if (rc == 0)
        rc = w_put(w, view.buf, view.len);
    PyBuffer_Release(&view);
    return rc;
}

/* Record data that may be referenced instead of copied (encode_into with
   reference_from). Only exact bytes, bytearray and plain byte memoryviews are
   handled here; anything else goes back to the Python code, which decides the same
   way for every type. */
static int
enc_records_ref(Writer *w, PyObject *v, int compact)
{
    Py_ssize_t n;
    if (PyBytes_CheckExact(v))
        n = PyBytes_GET_SIZE(v);
    else if (PyByteArray_CheckExact(v))
        n = PyByteArray_GET_SIZE(v);
    else if (Py_IS_TYPE(v, &PyMemoryView_Type)) {
        Py_buffer *mv = PyMemoryView_GET_BUFFER(v);
        if (mv->ndim != 1 || mv->itemsize != 1 || !PyBuffer_IsContiguous(mv, 'C')
            || mv->format == NULL || strcmp(mv->format, "B") != 0)
            return -1;
        n = mv->len;
    }
    else
        return -1;
    if (n < w->reference_from)
        return enc_buffer(w, v, compact, 1);
    if (n > INT32_MAX - 1 || enc_len(w, compact, n, 1) < 0)
        return -1;
    PyObject *item = Py_BuildValue("(nO)", w->base + w->len, v);
    if (item == NULL)
        return -1;
    int rc = PyList_Append(w->regions, item);
    Py_DECREF(item);
    return rc;
}

static int
enc_string(Writer *w, PyObject *v, int compact)
{
    if (!PyUnicode_Check(v))
        return -1;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(v, &n);
    if (s == NULL || n > 0x7FFF)
        return -1;
    if (enc_len(w, compact, n, 0) < 0)
        return -1;
    return w_put(w, s, n);
}

static int
enc_op(Writer *w, const Op *op, PyObject *v)
{
    switch (op->kind) {
    case OP_BOOL: case OP_I8: case OP_I16: case OP_U16: case OP_I32:
    case OP_U32: case OP_I64: case OP_F64: case OP_UUID:
        return enc_fixed(w, op->kind, v);
    case OP_STRING:
        if (v == Py_None)
            return op->nullable ? enc_null(w, op->compact, 0) : -1;
        return enc_string(w, v, op->compact);
    case OP_BYTES:
        if (v == Py_None) {
            if (!op->nullable && op->maybe_none)
                return -1;
            return enc_null(w, op->compact, 1);
        }
        return enc_buffer(w, v, op->compact, 0);
    case OP_RECORDS:
        if (v == Py_None)
            return enc_null(w, op->compact, 1);
        if (file_region_type != NULL && Py_IS_TYPE(v, (PyTypeObject *)file_region_type)) {
            if (w->regions == NULL)
                return -1;
            PyObject *ln = PyObject_GetAttr(v, str_length);
            if (ln == NULL)
                return -1;
            long long n = PyLong_CheckExact(ln) ? PyLong_AsLongLong(ln) : -1;
            Py_DECREF(ln);
            if (n < 0 || n > INT32_MAX)
                return -1;
            if (enc_len(w, op->compact, (Py_ssize_t)n, 1) < 0)
                return -1;
            PyObject *item = Py_BuildValue("(nO)", w->base + w->len, v);
            if (item == NULL)
                return -1;
            int rc = PyList_Append(w->regions, item);
            Py_DECREF(item);
            return rc;
        }
        if (w->regions != NULL && w->reference_from >= 0)
            return enc_records_ref(w, v, op->compact);
        return enc_buffer(w, v, op->compact, 1);
    case OP_STRUCT:
        if (v == Py_None)
            return op->nullable ? w_byte(w, 0xFF) : -1;
        if (op->nullable && w_byte(w, 1) < 0)
            return -1;
        return enc_struct(w, op->sub, v);
    case OP_ARRAY: {
        if (v == Py_None)
            return op->nullable ? enc_null(w, op->compact, 1) : -1;
        if (!PyList_Check(v) && !PyTuple_Check(v))
            return -1;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        if (enc_len(w, op->compact, n, 1) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i >= PySequence_Fast_GET_SIZE(v))
                return -1; /* changed under us */
            PyObject *x = PySequence_Fast_GET_ITEM(v, i);
            Py_INCREF(x);
            int rc = enc_op(w, op->elem, x);
            Py_DECREF(x);
            if (rc < 0)
                return -1;
        }
        return PySequence_Fast_GET_SIZE(v) == n ? 0 : -1;
    }
    }
    return -1;
}

/* 1 when v holds the field's default, 0 when not, -1 on error. */
static int
is_default(const Field *f, PyObject *v)
{
    switch (f->dkind) {
    case DEF_CONST:
        if (f->dval == Py_None)
            return v == Py_None;
        return PyObject_RichCompareBool(v, f->dval, Py_EQ);
    case DEF_LIST: {
        int t = PyObject_IsTrue(v);
        return t < 0 ? -1 : !t;
    }
    default: {
        if (f->tmpl != NULL && Py_TYPE(v) == f->tmpl->cls)
            return equals_tmpl(f->tmpl, v);
        PyObject *d = PyObject_CallNoArgs(f->dval);
        if (d == NULL)
            return -1;
        int r = PyObject_RichCompareBool(v, d, Py_EQ);
        Py_DECREF(d);
        return r;
    }
    }
}

typedef struct {
    uint64_t tag;
    const char *data;
    Py_ssize_t len;
} TagEntry;

static int
enc_tags(Writer *w, Prog *pr, PyObject *o)
{
    PyObject *unknown = pr->has_unknown ? SLOT(o, pr->unknown_offset) : Py_None;
    if (unknown == NULL)
        return -1;
    Py_ssize_t nu = 0;
    if (unknown != Py_None) {
        if (!PyList_Check(unknown))
            return -1;
        nu = PyList_GET_SIZE(unknown);
    }
    if (pr->ntagged == 0 && nu == 0)
        return w_byte(w, 0);
    int rc = -1;
    Py_INCREF(unknown);
    Py_ssize_t cap = pr->ntagged + nu;
    TagEntry *ents = PyMem_Calloc(cap ? cap : 1, sizeof(TagEntry));
    Writer *tw = PyMem_Calloc(pr->ntagged ? pr->ntagged : 1, sizeof(Writer));
    PyObject *held = PyList_New(0);
    Py_ssize_t ne = 0, ntw = 0;
    if (ents == NULL || tw == NULL || held == NULL)
        goto done;
    for (Py_ssize_t j = 0; j < pr->ntagged; j++) {
        Field *f = &pr->fields[pr->tagged[j]];
        PyObject *v = SLOT(o, f->offset);
        if (v == NULL)
            goto done;
        Py_INCREF(v);
        int d = is_default(f, v);
        if (d == 0) {
            Writer *t = &tw[ntw++];
            t->mode = W_RAW; /* no regions list: a file region here falls back */
            d = enc_op(t, &f->op, v) < 0 ? -1 : 0;
            ents[ne].tag = f->tag;
            ents[ne].data = t->buf;
            ents[ne].len = t->len;
            ne++;
        }
        Py_DECREF(v);
        if (d < 0)
            goto done;
    }
    if (nu > 0) {
        /* sorted(known + unknown) by tag: stable, so known ones first on a tie. */
        for (Py_ssize_t i = 0; i < nu; i++) {
            if (PyList_GET_SIZE(unknown) != nu)
                goto done;
            PyObject *item = PyList_GET_ITEM(unknown, i);
            if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || PyList_Append(held, item) < 0)
                goto done;
            PyObject *t = PyTuple_GET_ITEM(item, 0), *d = PyTuple_GET_ITEM(item, 1);
            if (!PyLong_CheckExact(t))
                goto done;
            unsigned long long tag = PyLong_AsUnsignedLongLong(t);
            if (tag == (unsigned long long)-1 && PyErr_Occurred())
                goto done;
            if (PyBytes_Check(d)) {
                ents[ne].data = PyBytes_AS_STRING(d);
                ents[ne].len = PyBytes_GET_SIZE(d);
            } else if (PyByteArray_Check(d)) {
                ents[ne].data = PyByteArray_AS_STRING(d);
                ents[ne].len = PyByteArray_GET_SIZE(d);
            } else {
                goto done;
            }
            ents[ne].tag = tag;
            Py_ssize_t k = ne++;
            while (k > 0 && ents[k - 1].tag > ents[k].tag) {
                TagEntry x = ents[k];
                ents[k] = ents[k - 1];
                ents[k - 1] = x;
                k--;
            }
        }
    }
    if (w_uvarint(w, (uint64_t)ne) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < ne; i++) {
        if (w_uvarint(w, ents[i].tag) < 0 || w_uvarint(w, (uint64_t)ents[i].len) < 0
            || w_put(w, ents[i].data, ents[i].len) < 0)
            goto done;
    }
    rc = 0;
done:
    if (tw != NULL) {
        for (Py_ssize_t i = 0; i < ntw; i++)
            PyMem_Free(tw[i].buf);
        PyMem_Free(tw);
    }
    PyMem_Free(ents);
    Py_XDECREF(held);
    Py_DECREF(unknown);
    return rc;
}

static int
enc_struct(Writer *w, Prog *pr, PyObject *o)
{
    if (Py_TYPE(o) != pr->cls)
        return -1;
    Py_INCREF(o);
    int rc = -1;
    for (Py_ssize_t i = 0; i < pr->nfields; i++) {
        Field *f = &pr->fields[i];
        if (f->role != ROLE_ABSENT || !f->check)
            continue;
        PyObject *v = SLOT(o, f->offset);
        if (v == NULL)
            goto done;
        Py_INCREF(v);
        int d = is_default(f, v);
        Py_DECREF(v);
        if (d != 1)
            goto done;
    }
    for (Py_ssize_t i = 0; i < pr->nfields; i++) {
        Field *f = &pr->fields[i];
        if (f->role != ROLE_FIELD)
            continue;
        PyObject *v = SLOT(o, f->offset);
        if (v == NULL)
            goto done;
        Py_INCREF(v);
        int r = enc_op(w, &f->op, v);
        Py_DECREF(v);
        if (r < 0)
            goto done;
    }
    if (pr->flex && enc_tags(w, pr, o) < 0)
        goto done;
    rc = 0;
done:
    Py_DECREF(o);
    return rc;
}

/* encode(self, version) -> bytes */
static PyObject *
sp_encode(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"self", "version"};
    PyObject *a[2];
    if (parse_args(args, nargs, kwnames, names, 2, 2, a) < 0)
        return call_pure(pure_encode, args, nargs, kwnames);
    Prog *pr = lookup((PyObject *)Py_TYPE(a[0]), a[1]);
    if (pr == NULL)
        return call_pure(pure_encode, args, nargs, kwnames);
    Writer w = {W_BYTES, NULL, NULL, 0, 0, 0, NULL, -1};
    w.obj = PyBytes_FromStringAndSize(NULL, 256);
    if (w.obj == NULL)
        return NULL;
    w.buf = PyBytes_AS_STRING(w.obj);
    w.cap = 256;
    if (enc_struct(&w, pr, a[0]) < 0 || _PyBytes_Resize(&w.obj, w.len) < 0) {
        Py_XDECREF(w.obj);
        return hand_back(pure_encode, args, nargs, kwnames);
    }
    n_done++;
    return w.obj;
}

/* encode_into(self, w, version, regions) -> None. The message is written into a
   private buffer and appended to w at the end: Python code the encoder may run
   (__eq__, __bool__) can then never move the memory being written. */
static PyObject *
sp_encode_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    static const char *const names[] = {"self", "w", "version", "regions", "reference_from"};
    PyObject *a[5];
    if (parse_args(args, nargs, kwnames, names, 4, 5, a) < 0 || !PyByteArray_CheckExact(a[1])
        || !PyList_CheckExact(a[3]))
        return call_pure(pure_encode_into, args, nargs, kwnames);
    Py_ssize_t reference_from = -1;
    if (a[4] != NULL) {
        if (!PyLong_CheckExact(a[4]))
            return call_pure(pure_encode_into, args, nargs, kwnames);
        reference_from = PyLong_AsSsize_t(a[4]);
        if (reference_from == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return call_pure(pure_encode_into, args, nargs, kwnames);
        }
        if (reference_from < 0)
            reference_from = -1;
    }
    Prog *pr = lookup((PyObject *)Py_TYPE(a[0]), a[2]);
    if (pr == NULL)
        return call_pure(pure_encode_into, args, nargs, kwnames);
    PyObject *regions = PyList_New(0);
    if (regions == NULL)
        return NULL;
    Py_ssize_t start = PyByteArray_GET_SIZE(a[1]);
    Writer w = {W_RAW, NULL, NULL, 0, 0, start, regions, reference_from};
    int rc = enc_struct(&w, pr, a[0]);
    if (rc == 0 && PyByteArray_GET_SIZE(a[1]) != start)
        rc = -1; /* w changed while encoding */
    if (rc == 0 && w.len > 0) {
        rc = PyByteArray_Resize(a[1], start + w.len);
        if (rc == 0)
            memcpy(PyByteArray_AS_STRING(a[1]) + start, w.buf, w.len);
    }
    PyMem_Free(w.buf);
    if (rc == 0 && PyList_GET_SIZE(regions) > 0)
        rc = PyList_SetSlice(a[3], PY_SSIZE_T_MAX, PY_SSIZE_T_MAX, regions);
    Py_DECREF(regions);
    if (rc < 0) {
        if (PyByteArray_GET_SIZE(a[1]) != start && PyByteArray_Resize(a[1], start) < 0)
            return NULL;
        return hand_back(pure_encode_into, args, nargs, kwnames);
    }
    n_done++;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------ record walk */

/* walk_records(data, count, base_timestamp, min_ts, max_ts, check_timestamps,
 * check_keys): the C twin of wire.record_walk.walk_records_py, which is the
 * reference (same checks in the same order, same fault codes). It walks a
 * batch's (inflated) record bytes without building anything and returns
 * (0, max timestamp, 0, keyless indexes, [(index, timestamp)]) or
 * (fault code, record index, value, [], []). */

enum {
    RW_RECORDS_TRUNCATED = 1, RW_VARINT_TRUNCATED, RW_VARINT_TOO_LONG, RW_VARINT_OUT_OF_RANGE,
    RW_RECORD_LENGTH, RW_OFFSET_DELTA, RW_KEY_LENGTH, RW_VALUE_LENGTH, RW_HEADER_COUNT,
    RW_HEADER_KEY_LENGTH, RW_HEADER_KEY_NOT_UTF8, RW_HEADER_VALUE_LENGTH, RW_RECORD_TRAILING,
    RW_BATCH_TRAILING
};

/* A zigzag varint of at most max_bytes bytes whose raw value fits `bits` bits. */
static inline int
rw_varint(const uint8_t *d, Py_ssize_t *pp, Py_ssize_t end, int max_bytes, int bits, int64_t *out)
{
    Py_ssize_t pos = *pp, start = pos;
    if (pos < end && d[pos] < 0x80) {
        uint64_t raw = d[pos];
        *pp = pos + 1;
        *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        return 0;
    }
    uint64_t raw = 0;
    int shift = 0, lost = 0;
    for (;;) {
        if (pos >= end)
            return RW_VARINT_TRUNCATED;
        uint8_t b = d[pos++];
        uint64_t part = (uint64_t)(b & 0x7F);
        if (shift == 63 && part > 1)
            lost = 1;
        raw |= part << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
        if (pos - start >= max_bytes)
            return RW_VARINT_TOO_LONG;
    }
    if (lost || (bits < 64 && (raw >> bits) != 0))
        return RW_VARINT_OUT_OF_RANGE;
    *pp = pos;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

static PyObject *
rw_fault(int code, Py_ssize_t index, int64_t value)
{
    return Py_BuildValue("(inL[][])", code, index, (long long)value);
}

static int
rw_utf8_ok(const uint8_t *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] >= 0x80) {
            PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
            if (s == NULL) {
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(s);
            return 1;
        }
    }
    return 1;
}

static PyObject *
sp_walk_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "walk_records takes 7 arguments");
        return NULL;
    }
    Py_ssize_t count = PyLong_AsSsize_t(args[1]);
    long long base = PyLong_AsLongLong(args[2]);
    long long lo = PyLong_AsLongLong(args[3]);
    long long hi = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    int check_ts = PyObject_IsTrue(args[5]);
    int check_keys = PyObject_IsTrue(args[6]);
    if (check_ts < 0 || check_keys < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *d = (const uint8_t *)view.buf;
    const Py_ssize_t end = view.len;
    PyObject *keyless = PyList_New(0), *bad = PyList_New(0), *result = NULL;
    if (keyless == NULL || bad == NULL)
        goto done;
    Py_ssize_t pos = 0, index = 0;
    int64_t highest = -1, v = 0;
    int code = 0;
#define RW(max_bytes, bits, limit) \
    do { if ((code = rw_varint(d, &pos, (limit), (max_bytes), (bits), &v)) != 0) { v = 0; goto fault; } } while (0)
#define FAULT(c, value) do { code = (c); v = (value); goto fault; } while (0)
    for (index = 0; index < count; index++) {
        if (pos >= end)
            FAULT(RW_RECORDS_TRUNCATED, 0);
        RW(5, 32, end);
        if (v < 1 || v > end - pos)
            FAULT(RW_RECORD_LENGTH, v);
        const Py_ssize_t record_end = pos + (Py_ssize_t)v;
        pos += 1; /* attributes */
        RW(10, 64, record_end);
        const int64_t delta = v;
        RW(5, 32, record_end);
        if (v != index)
            FAULT(RW_OFFSET_DELTA, v);
        RW(5, 32, record_end);
        if (v < -1 || v > record_end - pos)
            FAULT(RW_KEY_LENGTH, v);
        const int has_key = v >= 0;
        if (v > 0)
            pos += (Py_ssize_t)v;
        RW(5, 32, record_end);
        if (v < -1 || v > record_end - pos)
            FAULT(RW_VALUE_LENGTH, v);
        if (v > 0)
            pos += (Py_ssize_t)v;
        RW(5, 32, record_end);
        if (v < 0 || v > (record_end - pos) / 2)
            FAULT(RW_HEADER_COUNT, v);
        for (int64_t h = 0, headers = v; h < headers; h++) {
            RW(5, 32, record_end);
            if (v < 0 || v > record_end - pos)
                FAULT(RW_HEADER_KEY_LENGTH, v);
            if (!rw_utf8_ok(d + pos, (Py_ssize_t)v))
                FAULT(RW_HEADER_KEY_NOT_UTF8, 0);
            pos += (Py_ssize_t)v;
            RW(5, 32, record_end);
            if (v < -1 || v > record_end - pos)
                FAULT(RW_HEADER_VALUE_LENGTH, v);
            if (v > 0)
                pos += (Py_ssize_t)v;
        }
        if (pos != record_end)
            FAULT(RW_RECORD_TRAILING, record_end - pos);
        const int64_t ts = (int64_t)((uint64_t)base + (uint64_t)delta);
        if (ts > highest)
            highest = ts;
        if (check_keys && !has_key) {
            PyObject *i = PyLong_FromSsize_t(index);
            if (i == NULL || PyList_Append(keyless, i) < 0) {
                Py_XDECREF(i);
                goto done;
            }
            Py_DECREF(i);
        } else if (check_ts && ts != -1 && (ts < lo || ts > hi)) {
            PyObject *pair = Py_BuildValue("(nL)", index, (long long)ts);
            if (pair == NULL || PyList_Append(bad, pair) < 0) {
                Py_XDECREF(pair);
                goto done;
            }
            Py_DECREF(pair);
        }
    }
    if (pos != end) {
        index = count;
        FAULT(RW_BATCH_TRAILING, end - pos);
    }
#undef RW
#undef FAULT
    result = Py_BuildValue("(iLiOO)", 0, (long long)highest, 0, keyless, bad);
    goto done;
fault:
    result = rw_fault(code, index, v);
done:
    Py_XDECREF(keyless);
    Py_XDECREF(bad);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ module */

static PyObject *
sp_configure(PyObject *module, PyObject *args)
{
    PyObject *pf, *pd, *pda, *pe, *pei, *fr, *ut, *uu, *dl;
    if (!PyArg_ParseTuple(args, "OOOOOOO!OO", &pf, &pd, &pda, &pe, &pei, &fr, &PyType_Type, &ut,
                          &uu, &dl))
        return NULL;
    Py_ssize_t io = member_offset((PyTypeObject *)ut, "int");
    if (io < 0)
        return NULL;
    Py_ssize_t so = member_offset((PyTypeObject *)ut, "is_safe");
    if (so < 0)
        return NULL;
    Py_ssize_t lim[3];
    PyObject *const lim_names[3] = {str_max_array, str_max_bytes, str_max_tags};
    for (int i = 0; i < 3; i++) {
        PyObject *v = PyObject_GetAttr(dl, lim_names[i]);
        if (v == NULL)
            return NULL;
        lim[i] = PyLong_AsSsize_t(v);
        Py_DECREF(v);
        if (lim[i] < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "decode limits must not be negative");
            return NULL;
        }
    }
    default_max_array = lim[0];
    default_max_bytes = lim[1];
    default_max_tags = lim[2];
    uuid_int_off = io;
    uuid_safe_off = so;
#define SET(var, val) do { Py_INCREF(val); Py_XSETREF(var, val); } while (0)
    SET(program_for, pf);
    SET(pure_decode, pd);
    SET(pure_decode_at, pda);
    SET(pure_encode, pe);
    SET(pure_encode_into, pei);
    SET(file_region_type, fr);
    Py_INCREF(ut);
    Py_XSETREF(uuid_type, (PyTypeObject *)ut);
    SET(uuid_unknown, uu);
    SET(default_limits, dl);
#undef SET
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", sp_configure, METH_VARARGS, "Hands the module the pure-Python fallbacks."},
    {"counters", sp_counters, METH_NOARGS, "(calls finished here, calls handed to the Python code)"},
    {"decode", (PyCFunction)(void (*)(void))sp_decode, METH_FASTCALL | METH_KEYWORDS,
     "decode(cls, data, version, limits=DEFAULT_LIMITS)"},
    {"decode_at", (PyCFunction)(void (*)(void))sp_decode_at, METH_FASTCALL | METH_KEYWORDS,
     "decode_at(cls, buf, pos, version, limits=DEFAULT_LIMITS, end=None)"},
    {"encode", (PyCFunction)(void (*)(void))sp_encode, METH_FASTCALL | METH_KEYWORDS,
     "encode(message, version)"},
    {"encode_into", (PyCFunction)(void (*)(void))sp_encode_into, METH_FASTCALL | METH_KEYWORDS,
     "encode_into(message, w, version, regions, reference_from=-1)"},
    {"walk_records", (PyCFunction)(void (*)(void))sp_walk_records, METH_FASTCALL,
     "walk_records(data, count, base_timestamp, min_ts, max_ts, check_timestamps, check_keys)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "wire._speedups",
    "Optional C accelerator for the generated Kafka message codec.", -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    by_class = PyDict_New();
    compiled = PyDict_New();
    keep = PyList_New(0);
    str_length = PyUnicode_InternFromString("length");
    str_bytes = PyUnicode_InternFromString("bytes");
    str_max_array = PyUnicode_InternFromString("max_array_length");
    str_max_bytes = PyUnicode_InternFromString("max_bytes_length");
    str_max_tags = PyUnicode_InternFromString("max_tagged_fields");
    if (!by_class || !compiled || !keep || !str_length || !str_bytes || !str_max_array
        || !str_max_bytes || !str_max_tags) {
        Py_DECREF(m);
        return NULL;
    }
    /* Instance-method wrappers so encode and encode_into bind like methods. */
    PyObject *enc = PyObject_GetAttrString(m, "encode");
    PyObject *enc_into = PyObject_GetAttrString(m, "encode_into");
    PyObject *em = enc ? PyInstanceMethod_New(enc) : NULL;
    PyObject *eim = enc_into ? PyInstanceMethod_New(enc_into) : NULL;
    Py_XDECREF(enc);
    Py_XDECREF(enc_into);
    if (em == NULL || eim == NULL || PyModule_AddObject(m, "encode_method", em) < 0
        || PyModule_AddObject(m, "encode_into_method", eim) < 0) {
        Py_XDECREF(em);
        Py_XDECREF(eim);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
