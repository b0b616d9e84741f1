/* Tiny CPU-only program that emits every kind of NVTX event traceview reads (see PROVENANCE.md). */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <nvtx3/nvToolsExt.h>

static void spin_us(long us) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { clock_gettime(CLOCK_MONOTONIC, &t); }
    while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

static void *worker(void *arg) {
    (void)arg;
    nvtxNameOsThreadA((uint32_t)0, "ignored");
    nvtxRangePushA("worker.step");
    spin_us(300);
    nvtxRangePop();
    nvtxRangePushA("worker.never_popped"); /* left open on purpose */
    spin_us(100);
    return NULL;
}

int main(void) {
    nvtxDomainHandle_t dom = nvtxDomainCreateA("traceview.demo");
    nvtxStringHandle_t reg = nvtxDomainRegisterStringA(dom, "model.layers.registered");
    nvtxEventAttributes_t attr = {0};
    attr.version = NVTX_VERSION;
    attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    for (int step = 0; step < 2; ++step) {
        nvtxRangePushA("decode_step");
        for (int layer = 0; layer < 3; ++layer) {
            char name[32];
            snprintf(name, sizeof name, "model.layers.%d", layer);
            nvtxRangePushA(name);
            nvtxRangePushA("attn");
            spin_us(50);
            nvtxRangePop();
            nvtxRangePushA("mlp");
            spin_us(50);
            nvtxRangePop();
            nvtxRangePop();
        }
        nvtxRangePop();
    }
    nvtxMarkA("checkpoint");
    nvtxRangeId_t id = nvtxRangeStartA("startend.range");
    spin_us(200);
    nvtxRangeEnd(id);
    attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    attr.message.registered = reg;
    nvtxDomainRangePushEx(dom, &attr);
    spin_us(80);
    nvtxDomainRangePop(dom);
    attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attr.message.ascii = "domain.mark";
    nvtxDomainMarkEx(dom, &attr);
    attr.message.ascii = "domain.startend";
    nvtxRangeId_t did = nvtxDomainRangeStartEx(dom, &attr);
    spin_us(60);
    nvtxDomainRangeEnd(dom, did);
    pthread_t th;
    pthread_create(&th, NULL, worker, NULL);
    pthread_join(th, NULL);
    nvtxRangeStartA("startend.never_ended"); /* left open on purpose */
    nvtxRangePushA("main.never_popped");     /* left open on purpose */
    spin_us(100);
    return 0;
}
