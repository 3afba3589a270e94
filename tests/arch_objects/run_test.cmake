# Guards run-time dispatch: objects compiled with AVX2/AVX-512/AMX flags (src/**/*_avx2.cpp,
# *_avx512.cpp, *_amx.cpp) must not contain static initialisers (they run at library load, before any
# dispatch, and would execute AVX-512 instructions on CPUs without them) nor weak/inline
# functions with external linkage (the linker may pick the AVX-512 copy for baseline callers).
file(GLOB_RECURSE objs "${MIXP_BINARY_DIR}/CMakeFiles/mixp.dir/src/*_avx512.cpp.o"
                       "${MIXP_BINARY_DIR}/CMakeFiles/mixp.dir/src/*_avx2.cpp.o"
                       "${MIXP_BINARY_DIR}/CMakeFiles/mixp.dir/src/*_amx.cpp.o")
if(NOT objs)
  message(FATAL_ERROR "no arch-specific objects found under ${MIXP_BINARY_DIR}; build first")
endif()
set(bad "")
foreach(o IN LISTS objs)
  execute_process(COMMAND nm -C ${o} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed on ${o}")
  endif()
  string(REGEX MATCHALL "[^\n]*(_GLOBAL__sub_I|[0-9a-f]+ [WV] )[^\n]*" hits "${syms}")
  foreach(h IN LISTS hits)
    # DW.ref.__gxx_personality_v0 is a weak data word holding the address of the C++ personality
    # routine, the same in every object that has exception-cleanup tables (the asan preset's -O1
    # code has some); it holds no code, so which copy the linker keeps cannot matter.
    if(h MATCHES " V DW\\.ref\\.__gxx_personality_v0$")
      continue()
    endif()
    # Weak symbols from the standard library's templates are harmless only if compiled
    # without arch flags, which is never the case here: report them all.
    list(APPEND bad "${o}: ${h}")
  endforeach()
endforeach()
if(bad)
  string(REPLACE ";" "\n" bad "${bad}")
  message(FATAL_ERROR "arch-specific objects with static initialisers or weak symbols:\n${bad}")
endif()
list(LENGTH objs n)
message(STATUS "${n} arch-specific objects checked")
