package server

import "github.com/moat-sandbox/moat/api"

// handlers maps every operation of api.Ops to its implementation.
func (s *Service) handlers() map[string]handler {
	return map[string]handler{
		api.OpSandboxCreate:  s.createSandbox,
		api.OpSandboxList:    s.listSandboxes,
		api.OpSandboxGet:     s.getSandbox,
		api.OpSandboxDelete:  s.deleteSandbox,
		api.OpExec:           s.exec,
		api.OpStart:          s.start,
		api.OpProcessList:    s.listProcs,
		api.OpProcessGet:     s.getProc,
		api.OpOutput:         s.output,
		api.OpStdin:          s.stdinProc,
		api.OpSignal:         s.signalProc,
		api.OpWait:           s.waitProc,
		api.OpFileRead:       s.readFile,
		api.OpFileWrite:      s.writeFile,
		api.OpFileList:       s.listDir,
		api.OpFileStat:       s.statFile,
		api.OpFileMkdir:      s.mkdir,
		api.OpFileRemove:     s.remove,
		api.OpFileMove:       s.move,
		api.OpFileUpload:     s.upload,
		api.OpFileDownload:   s.download,
		api.OpTemplateList:   s.listTemplates,
		api.OpSnapshotCreate: s.createSnapshot,
		api.OpSnapshotList:   s.listSnapshots,
		api.OpSnapshotGet:    s.getSnapshot,
		api.OpSnapshotDelete: s.deleteSnapshot,
		api.OpSnapshotFork:   s.forkSnapshot,
		api.OpSandboxRestore: s.restoreSandbox,
		api.OpSandboxNetwork: s.setNetwork,
		api.OpAuditQuery:     s.auditQuery,
		api.OpApprovalList:   s.listApprovals,
		api.OpApprovalGet:    s.getApproval,
		api.OpApprovalAnswer: s.answerApproval,
		api.OpWorkflowCreate: s.createWorkflow,
		api.OpWorkflowList:   s.listWorkflows,
		api.OpWorkflowGet:    s.getWorkflow,
		api.OpWorkflowEvents: s.workflowEvents,
		api.OpWorkflowCancel: s.cancelWorkflow,
		api.OpWorkflowResume: s.resumeWorkflow,
		api.OpWorkflowAdd:    s.addWorkflowStep,
	}
}
