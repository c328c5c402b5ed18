#!/usr/bin/env bash
# Installs the Debian packages the build needs, only when something is missing.
#   scripts/install-deps.sh           what `make run` and `make test` need
#   scripts/install-deps.sh cluster   also HAProxy and Prometheus, for tests/cluster/ (CI runs this)
#   scripts/install-deps.sh aarch64   also the ARM cross compiler, the arm64 libraries (multiarch) and
#                                     qemu-user, for cmake/toolchain-aarch64.cmake (CI runs this)
set -euo pipefail
need=()
if [ "${1:-}" = cluster ]; then
  command -v haproxy >/dev/null || need+=(haproxy)
  command -v prometheus >/dev/null || need+=(prometheus)
  command -v ip >/dev/null || need+=(iproute2)
fi
if [ "${1:-}" = aarch64 ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO dpkg --add-architecture arm64
  fi
  command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
  command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
  for lib in libcjson-dev libmicrohttpd-dev libpng-dev libjpeg62-turbo-dev libwebp-dev; do
    dpkg -s "$lib:arm64" >/dev/null 2>&1 || need+=("$lib:arm64")
  done
fi
command -v cmake >/dev/null || need+=(cmake)
command -v gcc >/dev/null || need+=(gcc)
command -v clang >/dev/null || need+=(clang)
[ -f /usr/include/cjson/cJSON.h ] || need+=(libcjson-dev)
[ -f /usr/include/microhttpd.h ] || need+=(libmicrohttpd-dev)
# image decoding (vision/)
[ -f /usr/include/png.h ] || need+=(libpng-dev)
[ -f /usr/include/jpeglib.h ] || need+=(libjpeg62-turbo-dev)
[ -f /usr/include/webp/decode.h ] || need+=(libwebp-dev)
command -v python3 >/dev/null || need+=(python3)
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need+=(python3-venv)
# the Vulkan backend (backends/vulkan/): headers and glslc to build it, the loader, Mesa's lavapipe (a Vulkan
# device on the CPU) and the Khronos validation layer to test it, vulkaninfo to see devices
[ -f /usr/include/vulkan/vulkan.h ] || need+=(libvulkan-dev)
command -v glslc >/dev/null || need+=(glslc)
[ -f /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] || [ -f /usr/share/vulkan/icd.d/lvp_icd.aarch64.json ] ||
  need+=(mesa-vulkan-drivers)
[ -f /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json ] || need+=(vulkan-validationlayers)
command -v vulkaninfo >/dev/null || need+=(vulkan-tools)
# the server's chat-page test drives a real browser
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
