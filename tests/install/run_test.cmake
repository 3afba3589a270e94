# Proves the library is usable from another CMake project: install the build tree into a
# temporary prefix, then configure, build and run tests/install/consumer against it with
# find_package(mixp CONFIG) and the mixp::mixp target.
set(work ${MIXP_BINARY_DIR}/install-test)
file(REMOVE_RECURSE ${work})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${MIXP_BINARY_DIR} --prefix ${work}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
# A sanitized libmixp (the asan preset) needs the sanitizer runtimes first in the program that
# loads it, so the consumer is then built with the same -fsanitize flags.
set(sanitize "")
if(MIXP_SANITIZE)
  set(sanitize "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${MIXP_SOURCE_DIR}/tests/install/consumer -B ${work}/build
                -G ${MIXP_GENERATOR} -DCMAKE_PREFIX_PATH=${work}/prefix -DCMAKE_BUILD_TYPE=Release
                ${sanitize} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer with find_package(mixp) failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${work}/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed (${rc})")
endif()
execute_process(COMMAND ${work}/build/consumer RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "consumer said: ${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "bf16\\(3.14159265\\) = 3.140625 bits 0x4049")
  message(FATAL_ERROR "the installed library did not give the expected answer (rc ${rc})")
endif()
