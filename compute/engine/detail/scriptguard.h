#pragma once

// What a TorchScript file from a stranger may not do. TorchScript is a program: torch::jit::load
// already runs its classes' __setstate__, and forward() runs on every step, in the node's process.
// Most operators only compute on tensors, but a few reach outside: files (torch.save,
// torch.from_file), threads (fork/wait, which would also break the pinned thread count that
// verification stands on), the global random generator (manual_seed), remote calls (rpc_*) and
// LibTorch's custom classes (torch.classes: process groups, stores). A file whose code names any of
// them is refused before it is loaded. docs/SECURITY.md says what is left.

#include <core/error.h>

#include <QByteArray>

namespace tessera::compute::detail {

// Reads the archive's code (the code/*.py records torch::jit::load would compile) without
// running any of it; an error names the first forbidden call and the file it is in.
core::Status checkScriptArchive(const QByteArray& archive);

} // namespace tessera::compute::detail
