package guest

// file runs one file operation. Placeholder until the file worker lands:
// every operation is refused.
func (a *Agent) file(id uint64, op *FileOp, fds []int) {
	closeAll(fds)
	_ = a.conn.Send(&Message{Type: MsgFileDone, ID: id, Error: &ErrInfo{Stage: "file", Message: "file operations are not supported yet", Errno: "ENOSYS"}})
}
