# emu.cmake: the emulated CUDA device (docs/cuda-emu.md): the library
# tg_cuda_emu, a strictness check of its device header, and its tests.
# Included at the end of the top-level CMakeLists.txt.
enable_language(CXX)

set(TG_EMU_DIR ${CMAKE_CURRENT_SOURCE_DIR}/runtime/cuda/emu)

add_library(tg_cuda_emu STATIC
  ${TG_EMU_DIR}/emu_api.c ${TG_EMU_DIR}/emu_driver.c ${TG_EMU_DIR}/emu_exec.c ${TG_EMU_DIR}/emu_fiber.c
  ${TG_EMU_DIR}/emu_blaslt.c ${TG_EMU_DIR}/emu_compile.c ${TG_EMU_DIR}/emu_nccl.c ${TG_EMU_DIR}/emu_order.c)
# cuda_emu.h's text as a C array, rebuilt when the header changes: modules
# are compiled from it at run time with no include path.
tg_embed(tg_cuda_emu tg_cuda_emu_header ${TG_EMU_DIR}/cuda_emu.h)
target_include_directories(tg_cuda_emu PUBLIC ${TG_EMU_DIR})
target_link_libraries(tg_cuda_emu PUBLIC tg_cuda tg_jit tg_comm tg_base m ${CMAKE_DL_LIBS} Threads::Threads)
if(TG_SANITIZE)
  # modules are built with the sanitizers too, so the header's code is checked
  target_compile_definitions(tg_cuda_emu PRIVATE TG_EMU_SANITIZE=1)
endif()

# The device header under the project's warnings (modules are compiled
# without -Werror at run time, so this is where its warnings would show).
add_library(tg_cuda_emu_header_check OBJECT ${TG_EMU_DIR}/header_check.cpp)
set_target_properties(tg_cuda_emu_header_check PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF)
target_include_directories(tg_cuda_emu_header_check PRIVATE ${TG_EMU_DIR})

