/* A file's read-only mapping as a buffer (map_file): what the .ndf reader's Rows read
 * from (see _core_mapping.h). */
#include "_core_mapping.h"

#include <sys/mman.h>

/* A read-only shared mapping of a file, as a buffer: what mmap.mmap gives, without the
 * duplicate descriptor mmap.mmap keeps open for as long as it lives (so an open .ndf
 * holds one descriptor, not two). Unmapped when the last holder lets go. */
typedef struct {
    PyObject_HEAD
    void *addr;
    Py_ssize_t len;
} MappingObject;

static int Mapping_getbuffer(MappingObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->addr, self->len, 1, flags);
}

static void Mapping_dealloc(MappingObject *self)
{
    munmap(self->addr, (size_t)self->len);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs Mapping_as_buffer = {(getbufferproc)Mapping_getbuffer, NULL};

static PyTypeObject MappingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "exactbatch._core.Mapping",
    .tp_basicsize = sizeof(MappingObject),
    .tp_dealloc = (destructor)Mapping_dealloc,
    .tp_as_buffer = &Mapping_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A read-only mapping of a file: made by map_file().",
};

PyObject *map_file(PyObject *mod, PyObject *args)
{
    int fd;
    Py_ssize_t len;
    if (!PyArg_ParseTuple(args, "in:map_file", &fd, &len))
        return NULL;
    if (len <= 0) {
        PyErr_Format(PyExc_ValueError, "map_file: length must be positive; got %zd", len);
        return NULL;
    }
    void *addr;
    Py_BEGIN_ALLOW_THREADS
    addr = mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, fd, 0);
    Py_END_ALLOW_THREADS
    if (addr == MAP_FAILED)
        return PyErr_SetFromErrno(PyExc_OSError);
    MappingObject *m = PyObject_New(MappingObject, &MappingType);
    if (m == NULL) {
        munmap(addr, (size_t)len);
        return NULL;
    }
    m->addr = addr;
    m->len = len;
    return (PyObject *)m;
}

int mapping_ready(void)
{
    return PyType_Ready(&MappingType);
}
