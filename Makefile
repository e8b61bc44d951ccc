# fgex: one non-recursive Makefile.  `make` builds build/bin/{controld,nfqworker,proxyworker,fgexctl};
# `make run` and `make install` install the missing Debian packages that building and running
# need, `make test` and `make bench` those the tests and benchmarks add (deploy/install-deps.sh).
# `make SANITIZE=address,undefined test` builds into build/san-*/ with the sanitizers on; V=1 is verbose.

comma := ,
SANITIZE ?=
ifeq ($(SANITIZE),)
BUILD ?= build
else
BUILD ?= build/san-$(subst $(comma),-,$(SANITIZE))
endif

CC ?= cc
Q := $(if $(V),,@)

PKGS := libprotobuf-c libnetfilter_queue libnftnl libmnl lmdb libevent_core libevent_pthreads
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) libhs 2>/dev/null)
HS_CFLAGS := $(shell pkg-config --cflags libhs 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wstrict-prototypes
CFLAGS ?= -O2 -g
FGX_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -pthread -Ilibcommon/include -I$(BUILD)/proto -I. $(PKG_CFLAGS) -MMD -MP
FGX_LDFLAGS := -pthread
ifneq ($(SANITIZE),)
FGX_CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
FGX_LDFLAGS += -fsanitize=$(SANITIZE)
endif

LIBS_BASE := $(shell pkg-config --libs libprotobuf-c lmdb 2>/dev/null) -lnng
LIBS_NET := $(shell pkg-config --libs libnetfilter_queue libnftnl libmnl 2>/dev/null)
LIBS_EVENT := $(shell pkg-config --libs libevent_core libevent_pthreads 2>/dev/null)
LIBS_HS := -lhs
LIBS_TLS := -lmbedtls -lmbedx509 -lmbedcrypto -lcrypt
LIBS_HS_RT := -lhs_runtime
LIBS_TEST := $(shell pkg-config --libs criterion 2>/dev/null)

# ---- generated protobuf-c code (never committed) -------------------------------------------
PROTOS := $(wildcard proto/*.proto)
PROTO_C := $(patsubst proto/%.proto,$(BUILD)/proto/%.pb-c.c,$(PROTOS))
PROTO_H := $(PROTO_C:.c=.h)
PROTO_O := $(PROTO_C:.c=.o)

$(BUILD)/proto/%.pb-c.c $(BUILD)/proto/%.pb-c.h: proto/%.proto
	@mkdir -p $(dir $@)
	@echo "  PROTOC  $<"
	$(Q)protoc-c --c_out=$(BUILD)/proto -Iproto $<

# ---- objects --------------------------------------------------------------------------------
$(BUILD)/obj/%.o: %.c | $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(FGX_CFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/proto/%.pb-c.o: $(BUILD)/proto/%.pb-c.c $(PROTO_H)
	@echo "  CC      $<"
	$(Q)$(CC) $(FGX_CFLAGS) -Wno-error $(CFLAGS) -c -o $@ $<

objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

COMMON_SRC := $(wildcard libcommon/*.c)
CTL_SRC := $(filter-out controld/main.c,$(wildcard controld/*.c))
NFQ_SRC := $(filter-out nfqworker/main.c,$(wildcard nfqworker/*.c))
PX_SRC := $(filter-out proxyworker/main.c,$(wildcard proxyworker/*.c))
CLI_SRC := $(filter-out fgexctl/main.c,$(wildcard fgexctl/*.c))

# One archive per module (its objects minus main.o), so unit tests link what they test.
$(BUILD)/libcommon.a: $(call objs,$(COMMON_SRC)) $(PROTO_O)
$(BUILD)/libctl.a: $(call objs,$(CTL_SRC))
$(BUILD)/libnfq.a: $(call objs,$(NFQ_SRC))
$(BUILD)/libpx.a: $(call objs,$(PX_SRC))
$(BUILD)/libcli.a: $(call objs,$(CLI_SRC))
$(BUILD)/%.a:
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

BINS := controld nfqworker proxyworker fgexctl
all: $(addprefix $(BUILD)/bin/,$(BINS))

$(BUILD)/bin/controld: $(call objs,controld/main.c) $(BUILD)/libctl.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) -o $@ $^ $(LIBS_HS) $(LIBS_NET) $(LIBS_TLS) $(LIBS_BASE) -lm

$(BUILD)/bin/nfqworker: $(call objs,nfqworker/main.c) $(BUILD)/libnfq.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) -o $@ $^ $(LIBS_HS_RT) $(LIBS_NET) $(LIBS_BASE) -lm

$(BUILD)/bin/proxyworker: $(call objs,proxyworker/main.c) $(BUILD)/libpx.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) -o $@ $^ $(LIBS_HS_RT) $(LIBS_EVENT) $(LIBS_BASE) -lm

$(BUILD)/bin/fgexctl: $(call objs,fgexctl/main.c) $(BUILD)/libcli.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) -o $@ $^ $(LIBS_TLS) $(LIBS_BASE) -lm

# ---- unit tests (Criterion): tests/unit/test_<module>.c -> $(BUILD)/tests/test_<module> ---------
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
TEST_ARCHIVES := $(BUILD)/libctl.a $(BUILD)/libnfq.a $(BUILD)/libpx.a $(BUILD)/libcli.a $(BUILD)/libcommon.a

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_ARCHIVES)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) -o $@ $< $(TEST_ARCHIVES) $(LIBS_TEST) $(LIBS_HS) $(LIBS_NET) $(LIBS_EVENT) $(LIBS_TLS) $(LIBS_BASE) -lm

unit-tests: $(UNIT_BINS)

# ---- the two commands ---------------------------------------------------------------------
.PHONY: all deps deps-test deps-bench run stop test unit integration unit-tests clean bench \
	check-fresh
deps:
	$(Q)deploy/install-deps.sh run

deps-test:
	$(Q)deploy/install-deps.sh test

deps-bench:
	$(Q)deploy/install-deps.sh bench

run: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)deploy/run.sh $(BUILD)/bin

stop:
	$(Q)deploy/stop.sh

test: deps-test
	$(Q)$(MAKE) --no-print-directory all unit-tests
	$(Q)tests/run-all.sh $(BUILD)

unit: all unit-tests
	$(Q)tests/run-unit.sh $(BUILD)

integration: all
	$(Q)FGX_BIN=$(BUILD)/bin tests/integration/run.sh

# A short version of every benchmark (measurements, not tests): see docs/benchmarks.md.
bench: deps-bench
	$(Q)$(MAKE) --no-print-directory all
	$(Q)FGX_BIN=$(BUILD)/bin bench/run-all

# `make test` in a minimal Debian 12 made by debootstrap (build/fresh-root) with only make and git:
# proves the two commands work on a box that has nothing. Minutes, downloads; not part of CI.
check-fresh:
	$(Q)deploy/check-fresh.sh

clean:
	rm -rf build

.DEFAULT_GOAL := all
# Keep generated sources and objects: they are inputs of later steps, not throwaway files.
.SECONDARY:
-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
