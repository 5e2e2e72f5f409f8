/* An empty translation unit: CMake's <layer>_layer_check shared libraries link
   one layer's archive, whole, against only its declared dependencies with
   --no-undefined (CMakeLists.txt, opal_layer), so an undeclared call across
   layers is a link error. */
typedef int opal_layer_check_unit;
