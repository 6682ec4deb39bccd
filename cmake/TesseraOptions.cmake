# One INTERFACE target that carries the house compile options; every Tessera target links it.
add_library(tessera_options INTERFACE)
add_library(Tessera::options ALIAS tessera_options)

target_compile_features(tessera_options INTERFACE cxx_std_20)
target_compile_options(tessera_options INTERFACE
    -Wall -Wextra -Wpedantic -Wsuggest-override -Wnon-virtual-dtor $<$<CXX_COMPILER_ID:GNU>:-Wshadow=local>
    $<$<BOOL:${TESSERA_WERROR}>:-Werror>)
target_compile_definitions(tessera_options INTERFACE
    QT_NO_CAST_FROM_ASCII
    QT_NO_CAST_TO_ASCII
    QT_NO_URL_CAST_FROM_STRING
    QT_NO_CAST_FROM_BYTEARRAY
    QT_NO_NARROWING_CONVERSIONS_IN_CONNECT
    QT_NO_FOREACH
    QT_NO_KEYWORDS)

if(TESSERA_FUZZ)
    # Coverage for libFuzzer everywhere, and the sanitizers that turn bugs into crashes.
    target_compile_options(tessera_options INTERFACE
        -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
    target_link_options(tessera_options INTERFACE -fsanitize=address,undefined)
endif()

if(TESSERA_SANITIZE)
    target_compile_options(tessera_options INTERFACE
        -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
    target_link_options(tessera_options INTERFACE -fsanitize=address,undefined)
endif()

# Where the project's own sources and docs live, for tests that check docs against code.
set(TESSERA_SOURCE_DIR "${PROJECT_SOURCE_DIR}" CACHE INTERNAL "")
