package build

import (
	"archive/tar"
	"fmt"
	"io"
	"strings"
)

// Retar copies r, the tar fstree.WriteTar made of a directory whose top
// entry it named top, to w with top taken off ("top/a" becomes "a"; top
// itself is left out): the shape of a source package, whose root the
// daemon makes itself. check, when set, sees each entry's header (its
// name already relative) before its content is read, and may refuse it;
// skipped is asked before each entry and at the end whether WriteTar
// left one out (WriteTar reports it before it writes the next entry or
// its end), and its error ends the copy.
func Retar(r io.Reader, w io.Writer, top string, check func(hdr *tar.Header) error, skipped func() error) error {
	tr, tw := tar.NewReader(r), tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if sk := skipped(); sk != nil {
			return sk
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if hdr.Name == top || hdr.Name == top+"/" {
			continue
		}
		name, ok := strings.CutPrefix(hdr.Name, top+"/")
		if !ok {
			return fmt.Errorf("the source's tar has an entry %q outside %s", hdr.Name, top)
		}
		out := &tar.Header{Typeflag: hdr.Typeflag, Name: name, Linkname: hdr.Linkname, Size: hdr.Size, Mode: hdr.Mode, ModTime: hdr.ModTime}
		if check != nil {
			if err := check(out); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(out); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	return tw.Close()
}
