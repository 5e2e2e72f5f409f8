// The build's identity: the git commit it was configured from ("unknown"
// outside a git checkout). Generated into one source (core/version.cpp.in) so
// that a new commit recompiles one file, not the tree.
#pragma once

namespace opal {

const char* git_commit();

}  // namespace opal
