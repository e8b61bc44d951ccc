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

PKGS := libprotobuf-c libnetfilter_queue libnftnl libmnl lmdb libevent_core libevent_pthreads jansson \
	libseccomp libcap-ng
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) libhs 2>/dev/null)
HS_CFLAGS := $(shell pkg-config --cflags libhs 2>/dev/null)

WARN := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wstrict-prototypes
CFLAGS ?= -O2 -g
FGX_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -pthread -Ilibcommon/include -I$(BUILD)/proto -I$(BUILD)/gen -I. $(PKG_CFLAGS) -MMD -MP
FGX_LDFLAGS := -pthread
ifneq ($(SANITIZE),)
FGX_CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all -DFGX_SANITIZE
FGX_LDFLAGS += -fsanitize=$(SANITIZE)
endif

LIBS_BASE := $(shell pkg-config --libs libprotobuf-c lmdb 2>/dev/null) -lnng
# the workers' drop of privileges (libcommon/priv.c)
LIBS_PRIV := $(shell pkg-config --libs libseccomp libcap-ng 2>/dev/null)
LIBS_NET := $(shell pkg-config --libs libnetfilter_queue libnftnl libmnl 2>/dev/null)
LIBS_EVENT := $(shell pkg-config --libs libevent_core libevent_pthreads 2>/dev/null)
LIBS_SSL := $(shell pkg-config --libs libssl libcrypto 2>/dev/null)
LIBS_H2 := $(shell pkg-config --libs libnghttp2 2>/dev/null || echo -lnghttp2)
# gRPC messages compressed with gzip or deflate, inflated for the filters (px_grpc.c)
LIBS_Z := $(shell pkg-config --libs zlib 2>/dev/null || echo -lz)
# the HTTP kind toward an HTTP/1.1-only service (px_h2.c): http-parser has no .pc
LIBS_H1 := -lhttp_parser
LIBS_HS := -lhs
LIBS_TLS := -lmbedtls -lmbedx509 -lmbedcrypto -lcrypt
LIBS_HS_RT := -lhs_runtime
LIBS_TEST := $(shell pkg-config --libs criterion 2>/dev/null)
LIBS_JSON := $(shell pkg-config --libs jansson 2>/dev/null)
LIBS_HTTP := $(shell pkg-config --libs libmicrohttpd 2>/dev/null || echo -lmicrohttpd)
LIBS_PCAP := $(shell pkg-config --libs libpcap 2>/dev/null || echo -lpcap)

# ---- the version: from one place -----------------------------------------------------------
# A tag vX.Y.Z on HEAD or before it (git describe: 0.2.0+3+g1a2b3c4d for three commits past v0.2.0,
# '-' made '+' so that it is a Debian version too), else the VERSION file (a tree without git or
# without tags, as check-fresh's copy). Shown by controld --version, fgexctl --version, status,
# the page and the package. The header is rewritten only when it changes.
FGX_VERSION := $(or $(shell git describe --tags --match 'v[0-9]*' 2>/dev/null | sed 's/^v//; s/-/+/g'),$(shell cat VERSION))
VERSION_H := $(BUILD)/gen/fgx_version_gen.h
$(VERSION_H): FORCE
	@mkdir -p $(dir $@)
	@printf '#define FGX_VERSION "%s"\n' '$(FGX_VERSION)' | cmp -s - $@ || \
		printf '#define FGX_VERSION "%s"\n' '$(FGX_VERSION)' > $@

.PHONY: version
version:
	@echo $(FGX_VERSION)

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
$(BUILD)/obj/%.o: %.c | $(PROTO_H) $(VERSION_H)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(FGX_CFLAGS) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/proto/%.pb-c.o: $(BUILD)/proto/%.pb-c.c $(PROTO_H)
	@echo "  CC      $<"
	$(Q)$(CC) $(FGX_CFLAGS) -Wno-error $(CFLAGS) -c -o $@ $<

objs = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

COMMON_SRC := $(wildcard libcommon/*.c)
CTL_SRC := $(filter-out controld/main.c,$(wildcard controld/*.c))
NFQ_SRC := $(filter-out nfqworker/main.c,$(wildcard nfqworker/*.c))
PX_SRC := $(filter-out proxyworker/main.c,$(wildcard proxyworker/*.c))
CLI_SRC := $(filter-out fgexctl/main.c,$(wildcard fgexctl/*.c))
SW_SRC := $(wildcard scriptworker/*.c)

# ---- the dashboard's files (web/), built into controld (never committed) ---------------------
# tools/web_embed writes them into a C file; the list of files is kept in a file of its own that
# changes only when a file is added or removed, so that either regenerates it too.
WEB_FILES := $(sort $(shell find web -type f ! -name '.*' 2>/dev/null))
WEB_GEN := $(BUILD)/gen/ctl_web_files.c
$(BUILD)/tools/web_embed: tools/web_embed.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -o $@ $<

$(BUILD)/gen/web_files.list: FORCE
	@mkdir -p $(dir $@)
	@echo '$(WEB_FILES)' | cmp -s - $@ || echo '$(WEB_FILES)' > $@

# The script editor's names (completion, hover), read from the Python package at build time
# (tools/pyapi.py) and served as /lib/pyapi.json beside web/'s files.
WEB_PYAPI := $(BUILD)/gen/pyapi.json
$(WEB_PYAPI): tools/pyapi.py $(wildcard scriptworker/python/fgex/*.py)
	@mkdir -p $(dir $@)
	@echo "  PYAPI   $@"
	$(Q)/usr/bin/python3 -I -B tools/pyapi.py scriptworker/python $@

$(WEB_GEN): $(BUILD)/tools/web_embed $(BUILD)/gen/web_files.list $(WEB_FILES) $(WEB_PYAPI)
	@echo "  EMBED   web/ -> $@"
	$(Q)$(BUILD)/tools/web_embed $@ web $(WEB_FILES) /lib/pyapi.json=$(WEB_PYAPI)

$(BUILD)/gen/ctl_web_files.o: $(WEB_GEN)
	@echo "  CC      $<"
	$(Q)$(CC) $(FGX_CFLAGS) $(CPPFLAGS) $(CFLAGS) -c -o $@ $<

.PHONY: FORCE
FORCE:

# One archive per module (its objects minus main.o), so unit tests link what they test.
$(BUILD)/libcommon.a: $(call objs,$(COMMON_SRC)) $(PROTO_O)
$(BUILD)/libctl.a: $(call objs,$(CTL_SRC)) $(BUILD)/gen/ctl_web_files.o
$(BUILD)/libnfq.a: $(call objs,$(NFQ_SRC))
$(BUILD)/libpx.a: $(call objs,$(PX_SRC))
$(BUILD)/libcli.a: $(call objs,$(CLI_SRC))
$(BUILD)/%.a:
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

BINS := controld nfqworker proxyworker fgexctl scriptworker
all: $(addprefix $(BUILD)/bin/,$(BINS)) $(BUILD)/bin/fgex-python/.stamp

# The script filters' Python package (scriptworker/python), next to the binaries that run it.
PY_SRC := $(shell find scriptworker/python -name '*.py' 2>/dev/null)
$(BUILD)/bin/fgex-python/.stamp: $(PY_SRC)
	@mkdir -p $(dir $@)
	@echo "  PY      $(BUILD)/bin/fgex-python"
	$(Q)rm -rf $(BUILD)/bin/fgex-python.new && cp -r scriptworker/python $(BUILD)/bin/fgex-python.new && \
		find $(BUILD)/bin/fgex-python.new -name __pycache__ -prune -exec rm -rf {} + && \
		rm -rf $(BUILD)/bin/fgex-python && mv $(BUILD)/bin/fgex-python.new $(BUILD)/bin/fgex-python && \
		touch $@

# controld links fgexctl's command library (libcli.a: the command table, its builders and
# printers) for its web API (controld/ctl_webapi.c), so both speak the same JSON.
$(BUILD)/bin/controld: $(call objs,controld/main.c) $(BUILD)/libctl.a $(BUILD)/libcli.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS_HS) $(LIBS_NET) $(LIBS_HTTP) $(LIBS_TLS) $(LIBS_SSL) $(LIBS_JSON) $(LIBS_PCAP) $(LIBS_BASE) -lm

$(BUILD)/bin/nfqworker: $(call objs,nfqworker/main.c) $(BUILD)/libnfq.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS_HS_RT) $(LIBS_NET) $(LIBS_PRIV) $(LIBS_BASE) -lm

$(BUILD)/bin/proxyworker: $(call objs,proxyworker/main.c) $(BUILD)/libpx.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS_HS_RT) $(LIBS_EVENT) $(LIBS_SSL) $(LIBS_H2) $(LIBS_Z) $(LIBS_H1) $(LIBS_PRIV) $(LIBS_BASE) -lm

$(BUILD)/bin/scriptworker: $(call objs,$(SW_SRC)) $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS_HS_RT) $(LIBS_BASE) -lm

$(BUILD)/bin/fgexctl: $(call objs,fgexctl/main.c) $(BUILD)/libcli.a $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS_JSON) $(LIBS_PCAP) $(LIBS_TLS) $(LIBS_HS) $(LIBS_BASE) -lm

# ---- unit tests (Criterion): tests/unit/test_<module>.c -> $(BUILD)/tests/test_<module> ---------
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
TEST_ARCHIVES := $(BUILD)/libctl.a $(BUILD)/libnfq.a $(BUILD)/libpx.a $(BUILD)/libcli.a $(BUILD)/libcommon.a

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(TEST_ARCHIVES)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) $(LDFLAGS) -o $@ $< $(TEST_ARCHIVES) $(LIBS_TEST) $(LIBS_HS) $(LIBS_NET) $(LIBS_HTTP) $(LIBS_EVENT) $(LIBS_JSON) $(LIBS_PCAP) $(LIBS_TLS) $(LIBS_SSL) $(LIBS_H2) $(LIBS_Z) $(LIBS_H1) $(LIBS_PRIV) $(LIBS_BASE) -lm

unit-tests: $(UNIT_BINS)

# ---- fuzzing (libFuzzer, Debian's clang): tests/fuzz/fuzz_<parser>.c -> $(FUZZ)/fuzz_<parser> --
# Every object is compiled again with clang, coverage and ASan/UBSan, into $(FUZZ) (build/fuzz),
# beside the gcc build. `make fuzz` runs each harness for FUZZ_S seconds on its seed corpus
# (tests/fuzz/corpus/<name>, committed) plus what earlier runs found ($(FUZZ)/corpus/<name>,
# never committed); a crash is written to $(FUZZ)/crashes/. `make fuzz-replay` runs every seed
# once (seconds; part of `make test`). FUZZ_ONLY=NAME picks one harness.
FUZZ := build/fuzz
FUZZ_CC ?= clang
FUZZ_S ?= 60
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -pthread -Ilibcommon/include -I$(BUILD)/proto -I$(BUILD)/gen -I. \
	$(PKG_CFLAGS) -MMD -MP -O1 -g $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(FUZZ)/%,$(FUZZ_SRC))
FUZZ_NAMES := $(if $(FUZZ_ONLY),$(FUZZ_ONLY),$(patsubst tests/fuzz/%.c,%,$(FUZZ_SRC)))

$(FUZZ)/obj/%.o: %.c | $(PROTO_H) $(VERSION_H)
	@mkdir -p $(dir $@)
	@echo "  FUZZCC  $<"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(FUZZ)/obj/proto/%.pb-c.o: $(BUILD)/proto/%.pb-c.c $(PROTO_H)
	@mkdir -p $(dir $@)
	@echo "  FUZZCC  $<"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -Wno-error -c -o $@ $<

$(FUZZ)/obj/gen/ctl_web_files.o: $(WEB_GEN)
	@mkdir -p $(dir $@)
	@echo "  FUZZCC  $<"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

fuzz_objs = $(patsubst %.c,$(FUZZ)/obj/%.o,$(1))
$(FUZZ)/libcommon.a: $(call fuzz_objs,$(COMMON_SRC)) $(patsubst $(BUILD)/proto/%.pb-c.c,$(FUZZ)/obj/proto/%.pb-c.o,$(PROTO_C))
$(FUZZ)/libctl.a: $(call fuzz_objs,$(CTL_SRC)) $(FUZZ)/obj/gen/ctl_web_files.o
$(FUZZ)/libcli.a: $(call fuzz_objs,$(CLI_SRC))
$(FUZZ)/libpx.a: $(call fuzz_objs,$(PX_SRC))
FUZZ_ARCHIVES := $(FUZZ)/libctl.a $(FUZZ)/libcli.a $(FUZZ)/libpx.a $(FUZZ)/libcommon.a
$(FUZZ)/%.a:
	@mkdir -p $(dir $@)
	@echo "  AR      $@"
	$(Q)rm -f $@ && ar rcs $@ $^

# fuzz_norm takes nfqworker's normalise stage, which no archive holds.
$(FUZZ)/fuzz_norm: $(FUZZ)/obj/nfqworker/nfq_normalize.o

$(FUZZ)/fuzz_%: $(FUZZ)/obj/tests/fuzz/fuzz_%.o $(FUZZ_ARCHIVES)
	@echo "  LD      $@"
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -pthread -o $@ $(filter %.o,$^) $(FUZZ_ARCHIVES) $(LIBS_HS) \
		$(LIBS_NET) $(LIBS_HTTP) $(LIBS_EVENT) $(LIBS_JSON) $(LIBS_PCAP) $(LIBS_TLS) $(LIBS_SSL) \
		$(LIBS_H2) $(LIBS_Z) $(LIBS_H1) $(LIBS_BASE) -lm

# The binary seeds, made with fgex's own encoders (tests/fuzz/mkseeds.c), never committed.
$(FUZZ)/mkseeds: $(BUILD)/obj/tests/fuzz/mkseeds.o $(BUILD)/libcommon.a
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(FGX_LDFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS_HS) $(LIBS_BASE) -lm

$(FUZZ)/seeds/.stamp: $(FUZZ)/mkseeds
	$(Q)rm -rf $(FUZZ)/seeds && $(FUZZ)/mkseeds $(FUZZ)/seeds && touch $@

.PHONY: fuzz fuzz-bins fuzz-replay
fuzz-bins: $(FUZZ_BINS) $(FUZZ)/seeds/.stamp

fuzz: fuzz-bins
	$(Q)tests/fuzz/run.sh run $(FUZZ) $(FUZZ_S) $(FUZZ_NAMES)

fuzz-replay: fuzz-bins
	$(Q)tests/fuzz/run.sh replay $(FUZZ) 0 $(FUZZ_NAMES)

# ---- the two commands ---------------------------------------------------------------------
.PHONY: all deps deps-test deps-bench run stop test unit integration unit-tests clean bench \
	check-fresh check-deb deb deps-deb man install install-files uninstall
deps:
	$(Q)deploy/install-deps.sh run

deps-test:
	$(Q)deploy/install-deps.sh test

deps-bench:
	$(Q)deploy/install-deps.sh bench

run: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)deploy/run.sh $(BUILD)/bin $(MAKEOVERRIDES)

stop:
	$(Q)deploy/stop.sh $(MAKEOVERRIDES)

test: deps-test
	$(Q)$(MAKE) --no-print-directory all unit-tests fuzz-bins
	$(Q)tests/run-all.sh $(BUILD) $(FUZZ)

unit: all unit-tests
	$(Q)tests/run-unit.sh $(BUILD)

integration: all
	$(Q)FGX_BIN=$(BUILD)/bin tests/integration/run.sh

# A short version of every benchmark (measurements, not tests): see docs/benchmarks.md.
bench: deps-bench
	$(Q)$(MAKE) --no-print-directory all
	$(Q)FGX_BIN=$(BUILD)/bin bench/run-all

# ---- the Debian package -------------------------------------------------------------------
# `make deb`: $(DEB), built by dpkg-buildpackage from debian/ (which stages the tree with
# `make install-files`), then checked by lintian (deploy/build-deb.sh).
DEB := $(BUILD)/fgex_$(FGX_VERSION)_$(shell dpkg --print-architecture 2>/dev/null || echo amd64).deb
deb: deps-deb
	$(Q)deploy/build-deb.sh $(BUILD) $(FGX_VERSION)

deps-deb:
	$(Q)deploy/install-deps.sh deb

# `make check-fresh`, three legs, each in a minimal Debian made by debootstrap (build/fresh-*):
# `make test` in Debian 12 with only make and git (the two commands work on a box that has
# nothing); the package, built here, installed with apt alone in Debian 12, and a smoke test there
# (`make check-deb`); `make test` in Debian 13 (FRESH_SUITE=trixie). Minutes, downloads; not CI.
check-fresh: deb
	$(Q)deploy/check-fresh.sh source
	$(Q)deploy/check-fresh.sh deb $(DEB)
	$(Q)FRESH_SUITE=trixie deploy/check-fresh.sh source

check-deb: deb
	$(Q)deploy/check-fresh.sh deb $(DEB)

# ---- man pages (scdoc sources in docs/man, built into $(BUILD)/man) -------------------------
MAN_SRC := $(wildcard docs/man/*.scd)
MAN_PAGES := $(patsubst docs/man/%.scd,$(BUILD)/man/%,$(MAN_SRC))

$(BUILD)/man/%: docs/man/%.scd
	@mkdir -p $(dir $@)
	@echo "  SCDOC   $<"
	$(Q)scdoc < $< > $@.tmp && mv $@.tmp $@ || { rm -f $@.tmp; exit 1; }

man: $(MAN_PAGES)

# ---- install ------------------------------------------------------------------------------
# controld goes to sbin, fgexctl to bin, the workers to lib/fgex, where controld looks for them
# when they are not next to it. The configuration file is installed only if there is none.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
SBINDIR ?= $(PREFIX)/sbin
WORKERDIR ?= $(PREFIX)/lib/fgex
MANDIR ?= $(PREFIX)/share/man
UNITDIR ?= $(PREFIX)/lib/systemd/system
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/vendor-completions
CONFDIR ?= /etc/fgex
INSTALL ?= install

install: deps
	$(Q)$(MAKE) --no-print-directory install-files

# install without the packages (`make deb` stages the package's tree with it)
install-files: all man
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(WORKERDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(UNITDIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) \
		$(DESTDIR)$(CONFDIR)
	$(INSTALL) -m 755 $(BUILD)/bin/controld $(DESTDIR)$(SBINDIR)/controld
	$(INSTALL) -m 755 $(BUILD)/bin/fgexctl $(DESTDIR)$(BINDIR)/fgexctl
	$(INSTALL) -m 755 $(BUILD)/bin/nfqworker $(BUILD)/bin/proxyworker $(BUILD)/bin/scriptworker \
		$(DESTDIR)$(WORKERDIR)/
	rm -rf $(DESTDIR)$(WORKERDIR)/python && cp -r $(BUILD)/bin/fgex-python $(DESTDIR)$(WORKERDIR)/python
	# the interpreters run from build/bin may have left compiled files there since it was built
	find $(DESTDIR)$(WORKERDIR)/python -name __pycache__ -prune -exec rm -rf {} +
	rm -f $(DESTDIR)$(WORKERDIR)/python/.stamp
	$(INSTALL) -m 644 $(BUILD)/man/fgexctl.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 644 $(BUILD)/man/fgex-rules.5 $(DESTDIR)$(MANDIR)/man5/
	$(INSTALL) -m 644 $(BUILD)/man/controld.8 $(DESTDIR)$(MANDIR)/man8/
	sed 's|/usr/local/sbin/|$(SBINDIR)/|' deploy/fgex.service > $(DESTDIR)$(UNITDIR)/fgex.service
	chmod 644 $(DESTDIR)$(UNITDIR)/fgex.service
	$(INSTALL) -m 644 deploy/fgexctl.bash-completion $(DESTDIR)$(BASHCOMPDIR)/fgexctl
	$(INSTALL) -m 644 deploy/fgexctl.zsh-completion $(DESTDIR)$(ZSHCOMPDIR)/_fgexctl
	[ -e $(DESTDIR)$(CONFDIR)/controld.conf ] || \
		$(INSTALL) -m 644 deploy/controld.conf $(DESTDIR)$(CONFDIR)/controld.conf
	# the workers' user (controld --user; the unit's /etc is read-only, so made here)
	[ -n "$(DESTDIR)" ] || getent passwd fgex >/dev/null || useradd --system --no-create-home \
		--user-group --home-dir /nonexistent --shell /usr/sbin/nologin --comment "fgex workers" fgex

# Removes what install laid down; the configuration file only if it is still the sample, and
# never the state in /var/lib/fgex.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/controld $(DESTDIR)$(BINDIR)/fgexctl \
		$(DESTDIR)$(WORKERDIR)/nfqworker $(DESTDIR)$(WORKERDIR)/proxyworker \
		$(DESTDIR)$(WORKERDIR)/scriptworker \
		$(DESTDIR)$(MANDIR)/man1/fgexctl.1 $(DESTDIR)$(MANDIR)/man5/fgex-rules.5 \
		$(DESTDIR)$(MANDIR)/man8/controld.8 $(DESTDIR)$(UNITDIR)/fgex.service \
		$(DESTDIR)$(BASHCOMPDIR)/fgexctl $(DESTDIR)$(ZSHCOMPDIR)/_fgexctl
	rm -rf $(DESTDIR)$(WORKERDIR)/python
	-rmdir $(DESTDIR)$(WORKERDIR) 2>/dev/null
	if cmp -s deploy/controld.conf $(DESTDIR)$(CONFDIR)/controld.conf; then \
		rm -f $(DESTDIR)$(CONFDIR)/controld.conf; rmdir $(DESTDIR)$(CONFDIR) 2>/dev/null || true; fi

clean:
	rm -rf build

.DEFAULT_GOAL := all
# Keep generated sources and objects: they are inputs of later steps, not throwaway files.
.SECONDARY:
-include $(shell find $(BUILD)/obj $(FUZZ)/obj -name '*.d' 2>/dev/null)
