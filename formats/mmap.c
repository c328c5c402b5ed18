/* formats/mmap.c — read-only file mapping (POSIX). */
#include "formats/mmap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

gm_status gm_mmap_open(const char *path, gm_mmap *out, gm_error *err) {
    out->data = NULL;
    out->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* never block on a FIFO */
    if (fd < 0) return gm_fail(err, GM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return gm_fail(err, GM_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return gm_fail(err, GM_ERR_IO, "%s: is a directory, expected a file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return gm_fail(err, GM_ERR_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return gm_fail(err, GM_ERR_FORMAT, "%s: file is empty", path);
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file alive */
    if (p == MAP_FAILED) return gm_fail(err, GM_ERR_IO, "%s: cannot map %lld bytes: %s", path,
                                        (long long)st.st_size, strerror(e));
    out->data = p;
    out->size = (uint64_t)st.st_size;
    return GM_OK;
}

void gm_mmap_close(gm_mmap *m) {
    if (m && m->data) munmap((void *)m->data, (size_t)m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}
