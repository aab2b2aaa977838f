def infer_memory(program, arch):
    return program
